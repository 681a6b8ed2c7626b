"""Shared by the learning tests. A module of its own, not conftest: tests/flows has a conftest too, and
`from conftest import ...` picked whichever was imported first when both folders ran in one session."""

from __future__ import annotations

from cudal1.evaluator.config import EvalConfig

LIGHT = {"correctness_trials": 1, "timing_trials": 2, "target_trial_ms": 5.0, "warmup_iters": 1, "remeasure": 0,
         "cpu_threads": 1}


def light_protocol() -> EvalConfig:
    return EvalConfig(**LIGHT)
