"""A one-line elementwise problem and programs for it, shared by the tests of when a candidate's first call
is made (tests/test_warm_ahead.py, tests/test_tune_alone.py)."""

from __future__ import annotations

from cudal1.candidates import Candidate
from cudal1.problems import Problem

SCALE = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x * 2.0 + 1.0

def get_inputs():
    return [torch.randn(64, 64)]

def get_init_inputs():
    return []
'''
PROBLEM = Problem("warm-scale", 1, "scale", SCALE, suite="test")

SAME = SCALE + "\nclass ModelNew(Model):\n    pass\n"
# Raises on its first call only: a warm-up must not let it off.
FIRST_CALL_FAILS = SCALE + '''
class ModelNew(Model):
    calls = 0

    def forward(self, x):
        ModelNew.calls += 1
        if ModelNew.calls == 1:
            raise RuntimeError("lazy initialisation went wrong")
        return x * 2.0 + 1.0
'''


def candidate(source: str, tag: str) -> Candidate:
    """A candidate for :data:`PROBLEM`; the tag makes each one's source, and so its hash, its own."""
    return Candidate(PROBLEM.problem_id, f"# {tag}\n" + source, origin=tag)
