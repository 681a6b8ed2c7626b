"""A ReLU problem and programs that pass it with a chosen share of float32's tolerance used, shared by the
tests of a pass near its tolerance (tests/test_tolerance_edge.py, tests/test_edge_confirm.py)."""

from __future__ import annotations

from cudal1.candidates import Candidate
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


def program(offset: float) -> Candidate:
    """The reference's output plus ``offset`` everywhere: float32's atol is 1e-4, so 7e-5 uses 0.7 of it."""
    source = REFERENCE + f'''
class ModelNew(Model):
    def forward(self, x):
        return torch.relu(x) * 2.0 + {offset!r}
'''
    return Candidate(PROBLEM.problem_id, source)
