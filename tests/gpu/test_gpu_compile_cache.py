"""On a GPU a torch.compile program is warmed up by a build worker before its turn (builds.prebuild, step 2),
which compiles its graphs into the program's own source-keyed folder; the timed worker reads them from
there instead of compiling on its load (process.py: ``TORCHINDUCTOR_CACHE_DIR`` in the candidate's folder).

The program tells which happened: it counts Inductor's and AOTAutograd's cache hits from its import to its
first compiled call, and its outputs are wrong unless that call's graph came from the cache. The same
program without the warm-up (one evaluation, nothing prebuilt) must then be found incorrect, so an ``ok``
says the cache was read, not that the check cannot fail.

Run on the device machine: ``PYTHONPATH=. python -m pytest -m gpu tests/gpu``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from cudal1.candidates import Candidate, Status
from cudal1.evaluator import EvalConfig
from cudal1.evaluator.batch import evaluate_many
from cudal1.evaluator.core import evaluate_candidate
from cudal1.evaluator.workers import extensions_folder
from cudal1.problems import Problem

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

REFERENCE = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2 + 1

def get_inputs():
    return [torch.randn(4096, 256, device="cuda")]

def get_init_inputs():
    return []
"""

# One record per process (the module is imported once a worker); the worker's own stand-in compile
# (probes.warm_compile) comes before the import, so it is not counted.
CANDIDATE = """
import torch
import torch.nn as nn
from torch._dynamo.utils import counters


def _hits():
    return counters["inductor"]["fxgraph_cache_hit"] + counters["aot_autograd"]["autograd_cache_hit"]


SEEN = {"before": _hits(), "hit": None}


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.f = torch.compile(lambda x: torch.relu(x) * 2 + 1)

    def forward(self, x):
        out = self.f(x)
        if SEEN["hit"] is None:
            SEEN["hit"] = _hits() > SEEN["before"]
        return out if SEEN["hit"] else out + 1
"""


def _setup() -> tuple[Problem, Candidate, EvalConfig]:
    problem = Problem("gpu-compile_cache", 1, "compile_cache", REFERENCE, suite="test")
    config = EvalConfig(device="cuda:0", correctness_trials=2, recheck_above=None)
    return problem, Candidate(problem.problem_id, CANDIDATE), config


def test_the_timed_worker_reads_the_graphs_its_warm_up_compiled(ext_root: Path) -> None:
    problem, candidate, config = _setup()
    (result,) = evaluate_many([problem], [candidate], config, devices=["cuda:0"], extensions_root=ext_root)
    assert result.status is Status.OK, (result.status, result.reason)
    assert result.extra.get("prebuild_s", 0.0) > 0.0, result.extra  # a build worker warmed it up first
    graphs = extensions_folder(ext_root, candidate) / "inductor" / "fxgraph"
    assert any(f.is_file() for f in graphs.rglob("*")), f"no compiled graph in {graphs}"


def test_without_the_warm_up_the_same_program_compiles_afresh_and_is_found_out(
        ext_root: Path) -> None:
    problem, candidate, config = _setup()
    result = evaluate_candidate(problem, candidate, config, extensions_root=ext_root)
    assert result.status is Status.INCORRECT, (result.status, result.reason)
