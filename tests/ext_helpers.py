"""Pieces the extension tests share: the fixture problems, and a program that tries a C++ extension
and falls back to PyTorch when it does not build, as many released programs do."""

from __future__ import annotations

from pathlib import Path

from cudal1.evaluator import EvalConfig
from cudal1.problems import Problem

FIXTURES = Path(__file__).parent / "fixtures"
# Enough to get a verdict and a number, fast: no re-check, no re-measurement.
FAST = EvalConfig(correctness_trials=2, timing_trials=2, target_trial_ms=2.0, recheck_above=None, remeasure=0)


def fixture_problem(stem: str) -> Problem:
    """tests/fixtures/problems/<stem>.py as problem ``ext-<stem>``."""
    return Problem(f"ext-{stem}", 1, stem, (FIXTURES / "problems" / f"{stem}.py").read_text(), suite="test")


def fallback_program(name: str, cpp_sources: str) -> str:
    """A ModelNew for the scale_shift problem that binds ``scale_shift`` from ``cpp_sources`` as extension
    ``name`` and computes ``x * 2 + 1`` in PyTorch when the build fails."""
    return f'''
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

try:
    _ext = load_inline(name={name!r}, cpp_sources={cpp_sources!r}, functions=["scale_shift"])
except Exception:
    _ext = None


class ModelNew(nn.Module):
    def forward(self, x):
        return _ext.scale_shift(x) if _ext is not None else x * 2 + 1
'''
