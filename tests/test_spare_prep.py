"""A GPU worker's load prepares the reference's inputs on the spare cores and runs program code on its
timed core (sandbox.on_cores). The move is the same on any device; a worker is only given spare cores on a
GPU's host (worker_main), so these tests hand a CPU worker spare cores of their own."""

from __future__ import annotations

import os
import sys

import pytest

from cudal1.evaluator import sandbox
from cudal1.evaluator.worker import Worker

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="no CPU affinity on this platform")

# Both programs note the cores they ran on: the reference while its inputs are prepared, the candidate at
# its import and at its construction.
REFERENCE = """
import os
import torch
import torch.nn as nn

SEEN = []

class Model(nn.Module):
    def forward(self, x):
        return x * 2

def get_inputs():
    SEEN.append(sorted(os.sched_getaffinity(0)))
    return [torch.randn(8, 8)]

def get_init_inputs():
    return []
"""

CANDIDATE = """
import os
import torch.nn as nn

AT_IMPORT = sorted(os.sched_getaffinity(0))
BUILT = []

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        BUILT.append(sorted(os.sched_getaffinity(0)))

    def forward(self, x):
        return x * 2
"""


def test_the_block_runs_on_the_cores_given_and_the_thread_returns_to_its_own_even_when_it_raises() -> None:
    own = os.sched_getaffinity(0)
    spare = {min(own)}
    with sandbox.on_cores(spare):
        assert os.sched_getaffinity(0) == spare
    assert os.sched_getaffinity(0) == own
    with pytest.raises(RuntimeError), sandbox.on_cores(spare):
        raise RuntimeError("a preparation that fails")
    assert os.sched_getaffinity(0) == own
    with sandbox.on_cores(None):
        assert os.sched_getaffinity(0) == own


@pytest.mark.parametrize("has_spare", [True, False], ids=["spare-cores", "none"])
def test_a_loads_preparation_runs_on_the_spare_cores_and_the_program_on_the_workers_own(tmp_path, has_spare: bool) -> None:
    (tmp_path / "reference.py").write_text(REFERENCE)
    (tmp_path / "candidate.py").write_text(CANDIDATE)
    own = os.sched_getaffinity(0)
    spare = {min(own)}
    # worker_main gives a GPU worker its host's spare cores; none where the host has too few to split
    worker = Worker("cpu", 1, flush_l2=False, spare_cores=spare if has_spare else None)
    reply = worker.load({"role": "candidate", "reference_path": str(tmp_path / "reference.py"),
                         "candidate_path": str(tmp_path / "candidate.py"), "init_seed": 0})
    assert reply["ok"] and worker.plan is not None, reply
    prepared_on = worker.reference.SEEN[0]  # the plan's recording called get_inputs
    assert prepared_on == sorted(spare if has_spare else own)
    candidate = worker.init[0]
    module = sys.modules[candidate.__module__]
    assert module.AT_IMPORT == sorted(own) and module.BUILT == [sorted(own)]  # program code: the worker's own
    assert os.sched_getaffinity(0) == own
