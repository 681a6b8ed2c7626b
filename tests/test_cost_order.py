"""Problems handed to the devices largest first, by what their earlier evaluations cost (re-measurements
included), and a group's first candidate loaded beside its reference rather than after it."""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import cudal1.evaluator.batch as batch
import cudal1.evaluator.recheck as recheck
from cudal1.candidates import Candidate, Evaluation, Status, save_evaluations
from cudal1.evaluator import EvalConfig
from cudal1.evaluator.schedule import RunAhead, expected_costs, largest_first
from cudal1.evaluator.workers import device_name
from cudal1.problems import Problem, load_starter_suite


def _evaluation(pid: str, eval_s: float | None, **extra: Any) -> Evaluation:
    return Evaluation(pid, f"{pid}-c", Status.OK, speedup=1.0, eval_s=eval_s, extra=extra)


def test_expected_costs_take_the_whole_row_then_the_evaluation_and_the_median() -> None:
    costs = expected_costs([
        _evaluation("a", 1.0, row_s=4.0),  # re-checked: the row cost 4 s, its kept evaluation 1 s
        _evaluation("a", 2.0, row_s=2.5),
        _evaluation("a", 9.0, row_s=3.0),
        _evaluation("b", 1.5),  # before row_s was recorded
        _evaluation("c", None),  # no figure at all: no estimate
        _evaluation("d", 0.0),
    ])
    assert costs == {"a": 3.0, "b": 1.5}


def test_largest_first_weighs_candidates_and_puts_the_unknown_at_the_median() -> None:
    ordered = [("a", ["x"]), ("b", ["x", "y", "z"]), ("c", ["x"]), ("d", ["x"]), ("e", ["x"])]
    costs = {"a": 1.0, "b": 1.0, "c": 5.0, "d": 2.0}
    # b: 3 candidates of 1 s = 3; e: unknown, the median 1.5, after d (2) and before a (1)
    assert [pid for pid, _ in largest_first(ordered, costs)] == ["c", "b", "d", "e", "a"]
    assert largest_first(ordered, {}) == ordered  # nothing known: the order given


def _measured(problem: Problem, c: Candidate, config: EvalConfig, **_: Any) -> Evaluation:
    time.sleep(0.02)  # the device's time on the candidate, which row_s records
    return Evaluation(problem.problem_id, c.candidate_id, Status.OK, speedup=1.0, device=config.device,
                      device_name=device_name(config.device), config_hash=config.hash,
                      problem_sha256=problem.sha256, candidate_sha256=c.sha256, eval_s=0.01)


def test_a_batch_orders_its_problems_by_what_the_results_file_says_they_cost(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The results file's earlier evaluations (another protocol here) set the order; the new ones record
    the device loop's whole time on each candidate, for the next batch's order."""
    problems = load_starter_suite()[:4]
    ids = [p.problem_id for p in problems]
    earlier = [_evaluation(ids[0], 1.0), _evaluation(ids[1], 0.5, row_s=5.0), _evaluation(ids[2], 3.0)]
    path = tmp_path / "measurements.jsonl"
    save_evaluations(earlier, path)
    candidates = [Candidate(p.problem_id, f"# {p.problem_id}\nx = 1\n", candidate_id=p.problem_id) for p in problems]
    monkeypatch.setattr(recheck, "evaluate_candidate", _measured)
    order: list[str] = []
    new = batch.evaluate_many(problems, candidates, EvalConfig(device="cpu", static_checks=False),
                              results_path=path, progress=lambda e: order.append(e.problem_id))
    # 5 s, 3 s, then the unknown at the median (3 s, after the known one of the same cost), then 1 s
    assert order == [ids[1], ids[2], ids[3], ids[0]]
    assert all(e.extra["row_s"] >= 0.02 for e in new)
    # Costs passed in win over the file's: the same history, another protocol, the last problem first
    order.clear()
    other = tmp_path / "other.jsonl"
    save_evaluations(earlier, other)
    batch.evaluate_many(problems, candidates, EvalConfig(device="cpu", static_checks=False, timing_trials=7),
                        results_path=other, progress=lambda e: order.append(e.problem_id),
                        costs={ids[3]: 9.0, ids[0]: 1.0})
    assert order == [ids[3], ids[1], ids[2], ids[0]]  # the unknown two at the median (5 s), in their order


def _done(value: object) -> Future:
    future: Future = Future()
    future.set_result(value)
    return future


def test_a_groups_first_candidate_loads_beside_its_reference() -> None:
    """Nothing got the group's first candidate ready (the device's first group): its worker starts and
    its load is sent with the coming candidates', while the device loop loads the reference. Once it has
    a worker (the usual case, loaded ahead), nothing more is sent."""
    problem = Problem("p", 1, "p", "x")
    cands = [Candidate("p", f"# {i}\n", candidate_id=f"p.{i}") for i in range(3)]
    reference = _done("ref p")
    loads: list[str] = []
    with ThreadPoolExecutor(max_workers=4) as loader:
        ahead: RunAhead[str] = RunAhead(lambda p, c: f"worker {c.candidate_id}",
                                        lambda w, f: loads.append(w) or {"ok": True, "seed_from": f.result()},
                                        lambda f: None, lambda c: True, loader, discard=lambda w: None)
        ahead.start_group((problem, cands[0], reference), [(problem, c, reference) for c in cands[1:]])
        first = ahead.take(cands[0])
        assert first is not None and first.loaded is not None
        assert first.loaded.result() == {"ok": True, "seed_from": "ref p"}
        assert ahead.started[id(cands[1])].loaded is not None  # the coming ones went in the same batch
        for a in ahead.started.values():
            assert a.loaded is not None
            a.loaded.result()
        assert sorted(loads) == ["worker p.0", "worker p.1", "worker p.2"]
        ahead.start_group((problem, cands[1], reference), [(problem, cands[2], reference)])
        assert sorted(loads) == ["worker p.0", "worker p.1", "worker p.2"]  # already loading: nothing sent
        ahead.clear()
