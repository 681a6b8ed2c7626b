"""EvalConfig.call_pace: the timed workers read the host's pace before each call, and each evaluation
records the speedup over the calls read at the fast level beside the one over every call, deciding
nothing (cudal1/evaluator/pace.py). A real evaluation on the CPU, and the figure's own rules."""

from __future__ import annotations

from dataclasses import replace

from cudal1.candidates import Candidate, Status
from cudal1.evaluator import EvalConfig
from cudal1.evaluator.core import evaluate_candidate
from cudal1.evaluator.pace import (
    FAST_SLACK,
    MIN_FAST,
    MIN_FAST_TRIALS,
    call_probes,
    decided_speedup,
    fast_figure,
)
from cudal1.problems import load_starter_suite

CONFIG = EvalConfig(device="cpu", correctness_trials=2, timing_trials=5, remeasure=1, target_trial_ms=5.0,
                    recheck_above=None, static_checks=False)


def test_an_evaluation_records_the_fast_figure_only_when_asked_and_it_changes_no_hash() -> None:
    problem = load_starter_suite()[0]
    candidate = Candidate(problem.problem_id, problem.source.replace("class Model", "class ModelNew"))
    plain = evaluate_candidate(problem, candidate, CONFIG)
    paced = evaluate_candidate(problem, candidate, replace(CONFIG, call_pace=True))
    assert plain.status is paced.status is Status.OK, (plain.reason, paced.reason)
    assert "call_pace" not in plain.extra
    figure = paced.extra["call_pace"]
    # every trial's calls were probed on both sides. The level is the reference's 10th percentile over all
    # trials, so a tenth of its calls read fast, but they may all sit in one trial: on a loaded 2-core CI
    # machine the median trial's share read 0.0 (test_the_fast_calls_may_all_sit_in_one_trial)
    assert figure["fast_probe_ms"] > 0
    assert all(0.0 <= share <= 1.0 for share in figure["fast_share"])
    assert 0 <= figure["fast_trials"] <= paced.trials
    if figure["fast_trials"]:
        # the same program on both sides: the fast calls' figure is near 1, as the every-call one is
        assert 0.5 < figure["fast_speedup"] < 2.0
    assert CONFIG.hash == replace(CONFIG, call_pace=True).hash


def test_the_fast_level_comes_from_the_reference_and_slow_calls_are_left_out() -> None:
    fast, slow = [0.010] * 6, [0.016] * 6
    # a launch-bound reference: 2 ms at the fast level, 3.2 ms at the slow one; the candidate steady
    trials = [([2.0] * 6 + [3.2] * 6, fast + slow, [1.0] * 12, fast + slow),
              ([3.2] * 12, slow + slow, [1.0] * 12, slow + slow)]
    figure = fast_figure(trials)
    assert figure is not None and figure["fast_trials"] == 1 and figure["fast_speedup"] == 2.0
    assert figure["fast_probe_ms"] == round(FAST_SLACK * 0.010, 5)
    # a candidate that slows its own probes only loses its fast calls: no figure, never a larger one
    slowed = [([2.0] * 6 + [3.2] * 6, fast + slow, [0.5] * 6 + [1.0] * 6, slow + slow)]
    assert fast_figure(slowed)["fast_trials"] == 0 and fast_figure(slowed)["fast_speedup"] is None
    # fewer than MIN_FAST fast calls a side: no figure for that trial
    few = [([2.0] * (MIN_FAST - 1) + [3.2] * 9, [0.010] * (MIN_FAST - 1) + [0.016] * 9, [1.0] * 11, [0.010] * 11)]
    assert fast_figure(few)["fast_trials"] == 0
    assert fast_figure([([1.0], (), [1.0], ())]) is None


def test_the_fast_calls_may_all_sit_in_one_trial() -> None:
    # the host fast through the first trial only: the level (1.25x the pooled 10th percentile) is met by
    # that trial's calls alone, so the median trial has no fast call and no trial of two levels
    quick, slow = [0.010] * 10, [0.016] * 10
    trials = [([1.0] * 10, quick, [1.0] * 10, quick)] + [([1.6] * 10, slow, [1.6] * 10, slow)] * 4
    figure = fast_figure(trials)
    assert figure is not None and figure["fast_share"] == [0.0, 0.0]
    assert figure["fast_trials"] == 1 and figure["fast_speedup"] == 1.0


def test_a_reply_without_one_number_per_call_records_no_probes() -> None:
    assert call_probes({"call_pace_ms": [0.01, 0.02, 0.03]}, 3) == (0.01, 0.02, 0.03)
    assert call_probes({"call_pace_ms": [0.01, 0.02]}, 3) == ()
    assert call_probes({"call_pace_ms": "0.01"}, 1) == () and call_probes({}, 2) == ()


def test_the_rule_keeps_the_every_call_figure_for_a_candidate_that_hides_its_costly_calls() -> None:
    fast, slow = [0.010] * 8, [0.016] * 8
    # a launch-bound reference read in both spells: 2 ms fast, 3.2 ms slow (the host's 1.6x)
    reference = ([2.0] * 8 + [3.2] * 8, fast + slow)
    # an honest steady candidate beside it, probed in the same spells
    honest = [(*reference, [1.0] * 16, fast + slow)] * 4
    record = fast_figure(honest)
    assert record["level_ratio"] == [1.6, 1.0]
    assert decided_speedup(record, 2.6) == (2.0, "fast")
    # a candidate whose every other call does 3x the work and slows the probe in front of just those calls:
    # its fast calls are only its cheap ones, so the fast figure would double it
    hiding = [(*reference, [1.0, 3.0] * 8, [0.010, 0.016] * 8)] * 4
    record = fast_figure(hiding)
    assert record["fast_speedup"] == 2.0 and record["level_ratio"][1] == 3.0
    assert decided_speedup(record, 1.2) == (1.2, "candidate_levels")
    # one that slows most of its probes reads fast far less often than the reference: kept to every call
    shy = [(*reference, [1.0] * 16, [0.010] * 3 + [0.016] * 13)] * 4
    assert decided_speedup(fast_figure(shy), 2.6) == (2.6, "candidate_share")
    # too few trials with a fast figure, or none recorded: every call's figure
    assert decided_speedup(fast_figure(honest[:2]), 2.6) == (2.6, "few_fast_trials")
    assert decided_speedup(None, 2.6) == (2.6, "no_fast_figure")
    assert MIN_FAST_TRIALS == 3


def test_the_probe_is_harness_code_a_candidate_cannot_swap_unseen() -> None:
    from cudal1.evaluator import identity, pace, worker
    assert identity.harness_code()["pace.probe_ms"] is pace.probe_ms
    assert worker._own_code()["worker.probe_ms"] is pace.probe_ms
