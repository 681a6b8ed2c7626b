"""The reward: normalisation within groups, clipping, failure values, the pool as cache; one test runs
the real evaluator."""

from __future__ import annotations

import statistics

import pytest
from learning_helpers import light_protocol

from cudal1.candidates import Candidate
from cudal1.generation.templates import template_source
from cudal1.pool import CandidatePool
from cudal1.prompts import render_response
from cudal1.training.evaluation import evaluator_fn
from cudal1.training.rewards import (
    SpeedupReward,
    epoch_metrics,
    group_rewards,
    normalise_group,
)


def test_normalised_scores_have_zero_mean_and_unit_spread():
    z = normalise_group([1.0, 1.5, 2.5, 0.7])
    assert statistics.fmean(z) == pytest.approx(0.0, abs=1e-12)
    assert statistics.pstdev(z) == pytest.approx(1.0)
    assert z[2] > z[1] > z[0] > z[3]  # order kept


def test_failures_are_left_out_of_the_statistics():
    assert normalise_group([1.0, None, 3.0]) == normalise_group([1.0, 3.0])[:1] + [None] + [1.0]


def test_no_spread_means_no_preference():
    assert normalise_group([1.2, 1.2, None]) == [0.0, 0.0, None]
    assert normalise_group([4.0]) == [0.0]


def test_clipping_to_k():
    rewards = group_rewards([1.0] * 9 + [100.0], clip=1.5)
    assert max(rewards) == 1.5 and min(rewards) > -1.5  # z of the outlier is 3
    assert group_rewards([1.0] * 9 + [100.0], clip=1.0)[-1] == 1.0


def test_failure_value_is_fixed_and_below_every_correct_program():
    rewards = group_rewards([0.2, 1.0, 50.0, None, None], clip=1.5, failure_reward=-2.0)
    assert rewards[3:] == [-2.0, -2.0]
    assert min(rewards[:3]) > -2.0
    assert group_rewards([None, None, None]) == [-2.0] * 3


def test_failure_reward_must_not_exceed_minus_k():
    with pytest.raises(ValueError, match="outscore"):
        SpeedupReward({}, lambda p, c: [], CandidatePool(), clip=1.5, failure_reward=-1.0)


def test_groups_are_the_completions_of_one_prompt(problems):
    def by_length(probs, cands):  # a deterministic stand-in measurement, to check the grouping only
        from cudal1.candidates import Evaluation, Status

        return [Evaluation(c.problem_id, c.candidate_id, Status.OK, speedup=float(len(c.source))) for c in cands]

    p = problems[0]
    short, long = template_source(p, "no_grad"), template_source(p, "inference_mode")
    reward = SpeedupReward({p.problem_id: p}, by_length, CandidatePool())
    out = reward([render_response("a", "b", short), render_response("a", "b", long)] * 2,
                 prompts=["A", "A", "B", "B"], problem_id=[p.problem_id] * 4)
    assert out == [-1.0, 1.0, -1.0, 1.0] or out == [1.0, -1.0, 1.0, -1.0]
    assert reward.evaluated == 2  # two programs, each measured once


def test_admission_margin_reaches_the_pool(problems):
    # The reward decides which evaluated programs become exemplars; "improving" with a margin admits a
    # program only when it beats the problem's best exemplar by more than the margin.
    from cudal1.candidates import Evaluation, Status

    p = problems[0]
    speed = {template_source(p, "no_grad"): 1.10, template_source(p, "inference_mode"): 1.25}

    def measured(probs, cands):
        return [Evaluation(c.problem_id, c.candidate_id, Status.OK, speedup=speed[c.source]) for c in cands]

    for margin, admitted in ((0.0, {1.10, 1.25}), (0.15, {1.10})):  # 1.25 < 1.10 * 1.15
        pool = CandidatePool()
        reward = SpeedupReward({p.problem_id: p}, measured, pool, admit="improving", admit_margin=margin)
        for program in speed:  # one at a time: the first sets the bar for the second
            reward([render_response("a", "b", program)], prompts=["A"], problem_id=[p.problem_id])
        assert {e.speedup for e in pool.exemplars(p.problem_id)} == admitted


def test_a_cached_measurement_keeps_this_runs_provenance(problems):
    # The shared cache lends the measurement only: the pool entry is this stage's candidate, so the RL
    # stage's candidate table (origin == "contrastive_rl") lists every program the RL policy wrote.
    from cudal1.candidates import Status
    from cudal1.pool import PoolEntry

    p = problems[0]
    program = template_source(p, "no_grad")
    c = Candidate(p.problem_id, program, origin="self_supervised-0")
    cache = CandidatePool([PoolEntry(p.problem_id, c.candidate_id, c.sha256, program, c.origin, Status.OK.value,
                                     1.1, "", "self_supervised-0")])
    reward = SpeedupReward({p.problem_id: p}, lambda probs, cands: [], CandidatePool(), cache=cache,
                           stage="contrastive_rl")
    reward([render_response("a", "b", program)], prompts=["A"], problem_id=[p.problem_id])
    (entry,) = reward.pool.entries()
    assert (entry.origin, entry.stage, entry.speedup) == ("contrastive_rl", "contrastive_rl", 1.1)
    assert reward.evaluated == 0


def test_a_failed_reference_is_not_the_completions_failure(problems):
    # The evaluator reports a harness failure (the problem's reference would not load or run) as
    # runtime_error with reason "reference failed: ...". Scoring it as the candidate's failure taught the
    # policy against correct programs (docs/learning.md at 88f971b, experiments F and H): it gets None (TRL leaves it out of
    # the group's baseline), stays out of the group's normalisation, the pool, the cache and the success rate.
    from cudal1.candidates import Evaluation, Status

    p = problems[0]
    fine, unlucky = template_source(p, "no_grad"), template_source(p, "inference_mode")
    calls = []

    def flaky_harness(probs, cands):
        calls.append(len(cands))
        return [Evaluation(c.problem_id, c.candidate_id, Status.OK, speedup=1.0) if c.source == fine else
                Evaluation(c.problem_id, c.candidate_id, Status.RUNTIME_ERROR,
                           reason=f"reference failed: {c.problem_id}: reference failed to load: boom",
                           flags=("reference_failed",))
                for c in cands]

    cache = CandidatePool()
    reward = SpeedupReward({p.problem_id: p}, flaky_harness, CandidatePool(), failure_reward=-4.0, cache=cache)
    out = reward([render_response("a", "b", fine), render_response("a", "b", unlucky), "no code"],
                 prompts=["A"] * 3, problem_id=[p.problem_id] * 3)
    assert out == [0.0, None, -4.0]  # the correct program alone: no spread, 0; the malformed one is a failure
    assert [e.source for e in reward.pool.entries()] == [fine] and len(cache) == 1
    reward([render_response("a", "b", unlucky)], prompts=["B"], problem_id=[p.problem_id])
    assert calls == [2, 1]  # not cached: the next sight of the program measures it again
    metrics = epoch_metrics(reward.history)
    assert metrics["success_rate"] == 0.5 and metrics["mean_reward"] == -2.0  # of the two scored completions
    assert metrics["harness_failed_rate"] == 0.5


def test_a_response_must_hold_an_analysis_and_a_program(problems):
    # The learning stages reward a response that parses into a Performance Analysis and a program: without
    # the analysis it is malformed, never evaluated, and gets the failure reward.
    from cudal1.candidates import Evaluation, Status

    p = problems[0]
    program = template_source(p, "no_grad")
    seen: list[str] = []

    def measured(probs, cands):
        seen.extend(c.source for c in cands)
        return [Evaluation(c.problem_id, c.candidate_id, Status.OK, speedup=1.0) for c in cands]

    bare = f"## Code Implementation\n```python\n{program}```\n"
    reward = SpeedupReward({p.problem_id: p}, measured, CandidatePool(), failure_reward=-4.0, require_analysis=True)
    out = reward([render_response("1. x", "y", program), bare, render_response("", "y", program)],
                 prompts=["A"] * 3, problem_id=[p.problem_id] * 3)
    assert out == [0.0, -4.0, -4.0] and seen == [program]
    assert [r.status for r in reward.history] == ["ok", "malformed", "malformed"]
    lenient = SpeedupReward({p.problem_id: p}, measured, CandidatePool(), failure_reward=-4.0)
    assert lenient([bare], prompts=["A"], problem_id=[p.problem_id]) == [0.0]  # a program alone, outside learning


def test_real_evaluator_rewards_and_caches(problems, tmp_path):
    """Correct programs get normalised speedups, broken and malformed ones the failure value; every
    evaluation joins the pool (saved to disk), and a repeat is served from it."""
    p = problems[0]
    good = render_response("a", "b", template_source(p, "no_grad"))
    broken = render_response("a", "b", p.source + "\nclass ModelNew(Model):\n    def forward(self, x):\n"
                                                  "        return x.nonexistent()\n")
    calls: list[list[Candidate]] = []
    real = evaluator_fn(light_protocol())

    def recording(probs, cands):
        calls.append(list(cands))
        return real(probs, cands)

    reward = SpeedupReward({p.problem_id: p}, recording, CandidatePool(), pool_path=tmp_path / "pool.parquet")
    out = reward([good, broken, "no program", good], prompts=["q"] * 4, problem_id=[p.problem_id] * 4)
    assert out[1] == out[2] == -2.0
    assert out[0] == out[3] == 0.0  # the one correct program, twice: nothing to prefer
    assert [len(c) for c in calls] == [2]  # duplicates and malformed text never reach the evaluator
    statuses = {e.status for e in CandidatePool.load(tmp_path / "pool.parquet").entries()}
    assert statuses == {"ok", "runtime_error"}
    reward([good, broken], prompts=["r"] * 2, problem_id=[p.problem_id] * 2)
    assert len(calls) == 1  # all cached
    metrics = epoch_metrics(reward.history)
    assert metrics["success_rate"] == pytest.approx(3 / 6)
    assert metrics["cached_rate"] == pytest.approx(2 / 6)
