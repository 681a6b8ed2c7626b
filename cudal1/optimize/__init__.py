"""`cudal1 optimize`: make a user's own PyTorch module faster, with every variant verified and ranked.

``read_module`` turns a file into a problem (checked with ``check_module``), ``make_writers`` sets up the
models, ``optimize`` runs the rounds and writes the output folder.
"""

from cudal1.optimize.loop import OptimizeInterrupted, optimize
from cudal1.optimize.models import ModelFailure, make_writers
from cudal1.optimize.module import ModuleProblem, UserModule, check_module, read_module
from cudal1.optimize.state import NO_MODEL_HINT, OptimizeSettings, RunState

__all__ = ["NO_MODEL_HINT", "ModelFailure", "ModuleProblem", "OptimizeInterrupted", "OptimizeSettings", "RunState",
           "UserModule", "check_module", "make_writers", "optimize", "read_module"]
