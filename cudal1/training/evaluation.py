"""The evaluator, shaped as the learning stages' ``EvaluateFn``: one evaluation per candidate, in order."""

from __future__ import annotations

from collections.abc import Sequence

from cudal1.candidates import Candidate, Evaluation
from cudal1.evaluator.config import EvalConfig
from cudal1.evaluator.references import KEEP, KeptReferences
from cudal1.problems import Problem


class StageEvaluator:
    """``cudal1.evaluator.evaluate_many`` as an ``EvaluateFn``. No results file: the candidate pool is the
    learning stages' cache (saved after every batch), so a batch is never measured twice. The problems'
    reference workers stay warm from one call to the next (``keep`` of them, references.KeptReferences): a stage evaluates
    the same problems call after call. ``close`` ends them (at exit too)."""

    def __init__(self, config: EvalConfig, devices: Sequence[str] = ("cpu",), keep: int = KEEP) -> None:
        self.config, self.devices = config, list(devices)
        self.references = KeptReferences(keep)

    def __call__(self, problems: Sequence[Problem], candidates: Sequence[Candidate]) -> list[Evaluation]:
        from cudal1.evaluator import evaluate_many

        unique = list({p.problem_id: p for p in problems}.values())
        found = evaluate_many(unique, list(candidates), self.config, devices=self.devices, references=self.references)
        by_key = {(e.problem_id, e.candidate_sha256): e for e in found}
        missing = [c.candidate_id for c in candidates if (c.problem_id, c.sha256) not in by_key]
        if missing:  # evaluate_many skips nothing without a results file; anything else is a bug upstream
            raise RuntimeError(f"the evaluator returned no evaluation for candidates {missing[:5]}")
        return [by_key[(c.problem_id, c.sha256)] for c in candidates]

    def close(self) -> None:
        self.references.close()

    def __enter__(self) -> StageEvaluator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def evaluator_fn(config: EvalConfig, devices: Sequence[str] = ("cpu",), keep: int = KEEP) -> StageEvaluator:
    """The learning stages' evaluator (:class:`StageEvaluator`)."""
    return StageEvaluator(config, devices, keep)
