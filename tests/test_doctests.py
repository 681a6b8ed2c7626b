"""Doctests of the core's pure functions (reward functions carry theirs, per TRL's habit)."""

from __future__ import annotations

import doctest
import importlib

import pytest
from scripts import load_script

MODULES = ["cudal1.candidates", "cudal1.evaluator.timing", "cudal1.evaluator.trials", "cudal1.evaluator.compare", "cudal1.evaluator.extensions", "cudal1.evaluator.bindings", "cudal1.evaluator.batch", "cudal1.training.rewards", "cudal1.pool", "cudal1.prompts.parser", "cudal1.gate", "cudal1.reproduction", "cudal1.gpu_gaps", "cudal1.evaluator.timed", "cudal1.evaluator.toolchain", "cudal1.evaluator.device_draws", "cudal1.evaluator.probes", "cudal1.measured", "cudal1.reports", "cudal1.devices", "cudal1.config", "cudal1.generation.files", "cudal1.generation.augment", "cudal1.training.analysis"]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{name}: {result.failed} doctest(s) failed"
    if name in ("cudal1.evaluator.timing", "cudal1.training.rewards"):
        assert result.attempted > 0, f"{name} should carry doctests"


@pytest.mark.parametrize("script", ["release_bench", "release_eval", "fresh_clone"])
def test_benchmark_summary_doctests(script: str) -> None:
    """The summaries in benchmarks/ are scripts, not modules of the package: loaded by path."""
    module = load_script(script)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
