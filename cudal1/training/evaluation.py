"""The evaluator, shaped as the learning stages' ``EvaluateFn``: one evaluation per candidate, in order."""

from __future__ import annotations

from collections.abc import Sequence

from cudal1.candidates import Candidate, Evaluation
from cudal1.evaluator.config import EvalConfig
from cudal1.problems import Problem
from cudal1.training.rewards import EvaluateFn


def evaluator_fn(config: EvalConfig, devices: Sequence[str] = ("cpu",)) -> EvaluateFn:
    """Wrap ``cudal1.evaluator.evaluate_many``. No results file: the candidate pool is the learning
    stages' cache (saved after every batch), so a batch is never measured twice."""

    def evaluate(problems: Sequence[Problem], candidates: Sequence[Candidate]) -> list[Evaluation]:
        from cudal1.evaluator import evaluate_many

        unique = list({p.problem_id: p for p in problems}.values())
        found = evaluate_many(unique, list(candidates), config, devices=list(devices))
        by_key = {(e.problem_id, e.candidate_sha256): e for e in found}
        missing = [c.candidate_id for c in candidates if (c.problem_id, c.sha256) not in by_key]
        if missing:  # evaluate_many skips nothing without a results file; anything else is a bug upstream
            raise RuntimeError(f"the evaluator returned no evaluation for candidates {missing[:5]}")
        return [by_key[(c.problem_id, c.sha256)] for c in candidates]

    return evaluate
