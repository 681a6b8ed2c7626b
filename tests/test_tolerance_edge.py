"""A program that passes near its tolerance is flagged: its verdict may not repeat on other inputs (L2-43's
program passed twice using 77% of its 1e-2 allowance and failed once on 3 of 262,144 elements)."""

from __future__ import annotations

from cudal1.candidates import Candidate, Status
from cudal1.evaluator import EvalConfig
from cudal1.evaluator.core import evaluate_candidate
from cudal1.problems import Problem

REFERENCE = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2.0

def get_inputs():
    return [torch.randn(64, 64)]

def get_init_inputs():
    return []
'''

PROBLEM = Problem("edge-relu", 1, "edge relu", REFERENCE, suite="test")


def _program(offset: float) -> Candidate:
    source = REFERENCE + f'''
class ModelNew(Model):
    def forward(self, x):
        return torch.relu(x) * 2.0 + {offset!r}
'''
    return Candidate(PROBLEM.problem_id, source)


def test_a_pass_near_the_tolerance_is_flagged_and_an_exact_one_is_not() -> None:
    cfg = EvalConfig(device="cpu", timing=False)  # float32: atol = rtol = 1e-4
    near = evaluate_candidate(PROBLEM, _program(7e-5), cfg)
    assert near.status is Status.OK, near.reason
    assert 0.65 < near.extra["tolerance_used"] <= 0.7 and "tolerance_edge" in near.flags, (near.extra, near.flags)
    exact = evaluate_candidate(PROBLEM, _program(0.0), cfg)
    assert exact.status is Status.OK and exact.extra["tolerance_used"] == 0.0 and "tolerance_edge" not in exact.flags
    over = evaluate_candidate(PROBLEM, _program(2e-4), cfg)
    assert over.status is Status.INCORRECT and "outside atol=0.0001" in over.reason, over.reason
