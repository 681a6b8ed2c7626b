"""A second worker of a candidate whose re-check the history foretells, started and loaded ahead with the
coming candidates (recheck.Twins), so the re-measurement does not start and load a fresh process while
its device waits. The view and its batches without a device; then real CPU batches."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from cudal1.candidates import Candidate, Evaluation, Status, load_evaluations
from cudal1.evaluator import EvalConfig
from cudal1.evaluator.batch import evaluate_many
from cudal1.evaluator.recheck import Twins, expected_rechecks
from cudal1.evaluator.schedule import RunAhead
from cudal1.generation.templates import template_source
from cudal1.problems import Problem, load_starter_suite


def _done(value: object) -> Future:
    future: Future = Future()
    future.set_result(value)
    return future


def _cands(pid: str, n: int) -> tuple[Problem, list[Candidate]]:
    return Problem(pid, 1, pid, "x"), [Candidate(pid, f"# {pid} {i}\n", candidate_id=f"{pid}.{i}") for i in range(n)]


def test_the_history_foretells_a_re_check_by_its_record_or_its_speedup() -> None:
    config = EvalConfig(device="cpu", recheck_above=3.0)
    history = [
        Evaluation("p", "a", Status.OK, speedup=1.2, candidate_sha256="a", extra={"recheck_speedups": [4.0, 1.2]}),
        Evaluation("p", "b", Status.OK, speedup=5.0, candidate_sha256="b"),  # another protocol, no re-check then
        Evaluation("p", "c", Status.OK, speedup=2.9, candidate_sha256="c"),
        Evaluation("p", "d", Status.INCORRECT, speedup=None, candidate_sha256="d"),
        # fast, but it needed the device to itself once: a second copy would crowd its first measurement
        Evaluation("p", "e", Status.OK, speedup=4.0, candidate_sha256="e", flags=("retried_alone",)),
        Evaluation("p", "f", Status.OK, speedup=4.0, candidate_sha256="f"),
        Evaluation("p", "f", Status.RUNTIME_ERROR, candidate_sha256="f", reason="timing: CUDA out of memory."),
    ]
    assert expected_rechecks(history, config) == {"a", "b"}
    assert expected_rechecks(history, EvalConfig(device="cpu", recheck_above=None)) == set()
    assert expected_rechecks(history, EvalConfig(device="cpu", timing=False)) == set()


def test_twins_follow_their_candidates_and_the_current_ones_comes_last() -> None:
    problem, cands = _cands("p", 3)
    f = _done("reference of p")
    twins = Twins({cands[0].sha256, cands[2].sha256})
    twin0, twin2 = twins.of(cands[0]), twins.of(cands[2])
    assert twin0 is not None and twin2 is not None and twins.of(cands[1]) is None
    assert twin0 == cands[0] and twin0 is not cands[0]  # the same program, a distinct object
    assert twins.of(cands[0]) is twin0  # made once: RunAhead keeps its worker across views
    view = twins.around([(problem, c, f) for c in cands[1:]], (problem, cands[0], f))
    # the next candidate stays first (a batch of loads is sent when it has none); the current one's twin last
    assert [id(c) for _p, c, _f in view] == [id(cands[1]), id(cands[2]), id(twin2), id(twin0)]


def test_a_twin_loads_with_its_candidate_and_an_unused_one_goes_with_the_next_view() -> None:
    problem, cands = _cands("p", 3)
    f = _done("reference of p")
    twins = Twins({cands[1].sha256})
    discarded: list[str] = []
    with ThreadPoolExecutor(max_workers=6) as loader:
        names = iter(range(100))
        ahead: RunAhead[str] = RunAhead(lambda p, c: f"worker {c.candidate_id} #{next(names)}",
                                        lambda w, fut: {"ok": True, "worker": w}, lambda fut: None,
                                        lambda c: True, loader, discard=discarded.append)
        # timing p.0: p.1 and its twin come next, loaded in one batch
        waits = ahead.prepare(twins.around([(problem, c, f) for c in cands[1:]], (problem, cands[0], f)), problem)
        assert sorted(w.result()["worker"] for w in waits) == ["worker p.1 #0", "worker p.1 #1", "worker p.2 #2"]
        ahead.take(cands[1])
        # timing p.1: its twin stays in view, loaded, for its re-check
        ahead.prepare(twins.around([(problem, cands[2], f)], (problem, cands[1], f)), problem)
        assert discarded == []
        # p.1 was not re-checked after all: at p.2 its twin is no longer in view and goes
        ahead.take(cands[2])
        ahead.prepare(twins.around([], (problem, cands[2], f)), problem)
        assert discarded == ["worker p.1 #1"]
        ahead.clear()


def test_a_batch_re_checks_in_the_worker_loaded_ahead_where_the_history_expects_it(tmp_path: Path) -> None:
    """Every ok speedup is re-checked here (recheck_above 0): the first batch, with no history, starts each
    re-measurement's worker afresh; a second batch given the first's results re-checks in workers loaded
    ahead. Both measure the reference against itself, so each re-check has two measurements or more."""
    problems = [p for p in load_starter_suite() if p.name in ("Diag_matmul", "Square_matmul")]
    assert len(problems) == 2
    candidates = [Candidate(p.problem_id, template_source(p, "baseline"), origin="control") for p in problems]
    config = EvalConfig(device="cpu", correctness_trials=1, edge_trials=0, timing_trials=3, target_trial_ms=5,
                        recheck_above=0.0, run_timeout_s=60)
    first = evaluate_many(problems, candidates, config, results_path=tmp_path / "first.jsonl")
    second = evaluate_many(problems, candidates, config, results_path=tmp_path / "second.jsonl",
                           history=load_evaluations(tmp_path / "first.jsonl"))
    for runs, ahead in ((first, False), (second, True)):
        assert len(runs) == 2
        for e in runs:
            assert e.status in (Status.OK, Status.REJECTED), (e.status, e.reason)
            assert len(e.extra["recheck_speedups"]) >= 2 and e.extra["recheck_ahead"] is ahead, e.extra
