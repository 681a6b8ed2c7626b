"""Each evaluation records its trials' median times (extra.trial_ms): the reported speedup, its interval
and the trial count are recomputed from them alone. A real evaluation on the CPU."""

from __future__ import annotations

from cudal1.candidates import Candidate, Status
from cudal1.evaluator import EvalConfig
from cudal1.evaluator.core import evaluate_candidate
from cudal1.evaluator.timing import Measurement, TrialPair
from cudal1.problems import load_starter_suite

CONFIG = EvalConfig(device="cpu", correctness_trials=2, timing_trials=5, remeasure=1, target_trial_ms=5.0,
                    recheck_above=None, static_checks=False)


def test_the_recorded_trials_give_the_reported_figures() -> None:
    problem = load_starter_suite()[0]
    result = evaluate_candidate(problem, Candidate(problem.problem_id, problem.source.replace("class Model",
                                                                                              "class ModelNew")), CONFIG)
    assert result.status is Status.OK, result.reason
    trials = result.extra["trial_ms"]
    # the reference's worker read the host's pace around its batches (pace.py)
    assert result.extra["host_pace_ms"] > 0
    assert len(trials) == result.trials and CONFIG.timing_trials <= len(trials) <= 10
    again = Measurement.from_pairs([TrialPair([r], [c], 0.0, 0.0) for r, c in trials])
    # four significant digits recorded: the figures agree to that rounding
    assert abs(again.speedup / result.speedup - 1) < 1e-3
    assert abs(again.low / result.speedup_low - 1) < 1e-3 and abs(again.high / result.speedup_high - 1) < 1e-3
