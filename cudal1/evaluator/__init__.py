"""The evaluator: static checks -> isolated build/load -> correctness -> timing -> verdict.

Public API:
    evaluate_candidate(problem, candidate, config) -> Evaluation
    evaluate_many(problems, candidates, config, devices=..., results_path=..., progress=...) -> list[Evaluation]
"""

from cudal1.evaluator.config import EvalConfig

__all__ = ["EvalConfig", "evaluate_candidate", "evaluate_many"]


def __getattr__(name: str):  # lazy: importing the config must not start anything heavy
    if name == "evaluate_candidate":
        from cudal1.evaluator.core import evaluate_candidate

        return evaluate_candidate
    if name == "evaluate_many":
        from cudal1.evaluator.batch import evaluate_many

        return evaluate_many
    raise AttributeError(name)
