"""A program that passes near its tolerance is flagged: its verdict may not repeat on other inputs (L2-43's
program passed twice using 77% of its 1e-2 allowance and failed once on 3 of 262,144 elements)."""

from __future__ import annotations

from cudal1.candidates import Candidate, Status
from cudal1.evaluator import EvalConfig
from cudal1.evaluator.core import evaluate_candidate
from tests.edge_problem import PROBLEM, REFERENCE
from tests.edge_problem import program as _program


def test_a_pass_near_the_tolerance_is_flagged_and_an_exact_one_is_not() -> None:
    cfg = EvalConfig(device="cpu", timing=False)  # float32: atol = rtol = 1e-4
    near = evaluate_candidate(PROBLEM, _program(7e-5), cfg)
    assert near.status is Status.OK, near.reason
    assert 0.65 < near.extra["tolerance_used"] <= 0.7 and "tolerance_edge" in near.flags, (near.extra, near.flags)
    exact = evaluate_candidate(PROBLEM, _program(0.0), cfg)
    assert exact.status is Status.OK and exact.extra["tolerance_used"] == 0.0 and "tolerance_edge" not in exact.flags
    over = evaluate_candidate(PROBLEM, _program(2e-4), cfg)
    assert over.status is Status.INCORRECT and "outside atol=0.0001" in over.reason, over.reason


def test_a_pass_near_the_tolerance_gets_more_draws_and_a_clear_pass_does_not() -> None:
    """Near the edge the verdict is decided on correctness_trials + edge_trials draws; far from it on the
    configured trials alone (their cost is paid only where a verdict might not repeat)."""
    cfg = EvalConfig(device="cpu", timing=False, correctness_trials=3, edge_trials=4)
    near = evaluate_candidate(PROBLEM, _program(7e-5), cfg)
    assert near.status is Status.OK and near.correctness_trials == 7 and "tolerance_edge" in near.flags, near
    clear = evaluate_candidate(PROBLEM, _program(1e-5), cfg)  # 10-20% of the allowance
    assert clear.status is Status.OK and clear.correctness_trials == 3 and "tolerance_edge" not in clear.flags
    off = evaluate_candidate(PROBLEM, _program(7e-5), EvalConfig(device="cpu", timing=False, correctness_trials=3,
                                                                 edge_trials=0))
    assert off.correctness_trials == 3


def test_a_program_that_fails_some_draws_near_the_edge_is_decided_by_the_extra_draws() -> None:
    """Passes its first trials at the edge, then goes over on a later draw: incorrect, at an edge trial."""
    source = REFERENCE + '''
class ModelNew(Model):
    calls = 0

    def forward(self, x):
        ModelNew.calls += 1
        return torch.relu(x) * 2.0 + (7e-5 if ModelNew.calls <= 4 else 3e-4)
'''
    cfg = EvalConfig(device="cpu", timing=False, correctness_trials=3, edge_trials=4, static_checks=False)
    result = evaluate_candidate(PROBLEM, Candidate(PROBLEM.problem_id, source), cfg)
    assert result.status is Status.INCORRECT and "correctness trial" in result.reason, result.reason
    trial = int(result.reason.split("correctness trial ")[1].split(":")[0].split()[0])
    assert trial > 3, result.reason
