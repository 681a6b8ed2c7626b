"""On a GPU's host, a candidate worker's load prepares the reference's inputs on the spare cores and runs
the program's code only on its device's timed core (sandbox.on_cores).

The reference notes the cores its first ``get_inputs`` ran on in the worker's environment (the plan's
recording calls it in the candidate's worker too); the program, at its import, raises with those cores and its own, so the verdict's reason
carries both back from the sandboxed worker.

Run on the device machine: ``PYTHONPATH=. python -m pytest -m gpu tests/gpu``.
"""

from __future__ import annotations

import ast
import os

import pytest
import torch

from cudal1.candidates import Candidate
from cudal1.evaluator import EvalConfig
from cudal1.evaluator.core import evaluate_candidate
from cudal1.problems import Problem

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    pytest.mark.skipif(len(os.sched_getaffinity(0)) < 4, reason="too few cores to set one apart"),
]

REFERENCE = """
import os
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return x * 2

def get_inputs():
    os.environ.setdefault("SPARE_PREP_TEST_CORES", repr(sorted(os.sched_getaffinity(0))))
    return [torch.randn(1024, device="cuda")]

def get_init_inputs():
    return []
"""

CANDIDATE = """
import os
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return x * 2


prepared = os.environ.get("SPARE_PREP_TEST_CORES")
raise RuntimeError(f"CORES {prepared} | {sorted(os.sched_getaffinity(0))!r} END")
"""


def _cores(reason: str) -> tuple[list[int], list[int]]:
    body = reason[reason.index("CORES ") + len("CORES "):reason.index(" END")]
    prepared, program = body.split(" | ")
    return ast.literal_eval(prepared), ast.literal_eval(program)


def test_the_preparation_runs_on_the_spare_cores_and_the_program_on_the_timed_one() -> None:
    problem = Problem("gpu-spare_prep", 1, "spare_prep", REFERENCE, suite="test")
    config = EvalConfig(device="cuda:0", correctness_trials=2, recheck_above=None)
    result = evaluate_candidate(problem, Candidate(problem.problem_id, CANDIDATE), config)
    assert "CORES " in (result.reason or ""), (result.status, result.reason)
    prepared, program = _cores(result.reason or "")
    assert len(program) == 1, program  # the device's timed core, alone
    assert len(prepared) > 1 and program[0] not in prepared, (prepared, program)
