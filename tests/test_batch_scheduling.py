"""The batch's schedule, part by part, without a device: the shared queue hands out problems whose
candidates need no build (or whose builds are done) first, so a device never idles behind a compile while
other work is ready; one device's queue looks a few candidates ahead across a problem's end; the run-ahead
starts the workers in view, loads them a batch at a time, and lets go of those no longer coming; timing
waits for the loads and pauses builds."""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from cudal1.candidates import Candidate
from cudal1.evaluator.builds import QUIET
from cudal1.evaluator.schedule import DeviceQueue, Groups, RunAhead, build_order, quiet_after
from cudal1.problems import Problem


def _group(pid: str, n: int = 1) -> tuple[Problem, list[Candidate]]:
    return Problem(pid, 1, pid, "x"), [Candidate(pid, f"# {pid} {i}\n", candidate_id=f"{pid}.{i}") for i in range(n)]


def _done(value: object) -> Future:
    future: Future = Future()
    future.set_result(value)
    return future


def _queue(groups: Groups, started: list[str], depth: int = 2) -> DeviceQueue:
    """A device queue (``depth`` candidates ahead) whose reference start records the problem and returns its name."""
    def start(problem: Problem) -> Future:
        started.append(problem.problem_id)
        return _done(f"reference of {problem.problem_id}")
    return DeviceQueue(groups, start, depth)


def test_ready_groups_first_then_waits_for_builds() -> None:
    slow, fast = _group("needs-build"), _group("plain")
    build: Future[str] = Future()
    groups = Groups([slow, fast], {slow[1][0].sha256: build})
    assert groups.take()[0].problem_id == "plain"  # type: ignore[index]
    assert groups.take(block=False) is None  # only the unbuilt one is left: not ready yet
    threading.Timer(0.3, build.set_result, args=("",)).start()
    started = time.perf_counter()
    assert groups.take()[0].problem_id == "needs-build"  # type: ignore[index]
    assert time.perf_counter() - started >= 0.2  # it waited for the build instead of spinning past it
    assert groups.take() is None and groups.take(block=False) is None


def test_a_long_wait_for_builds_is_reported(caplog: pytest.LogCaptureFixture) -> None:
    """A device that finds no group ready says how long it has waited and for how many builds."""
    slow = _group("needs-build", 2)
    builds: dict[str, Future[str]] = {c.sha256: Future() for c in slow[1]}
    groups = Groups([slow], builds)
    groups.report_every_s = 0.1
    for i, future in enumerate(builds.values()):
        threading.Timer(0.25 + 0.1 * i, future.set_result, args=("",)).start()
    with caplog.at_level(logging.WARNING, logger="cudal1.evaluator.schedule"):
        assert groups.take()[0].problem_id == "needs-build"  # type: ignore[index]
    waits = [r.getMessage() for r in caplog.records]
    assert waits and all("no problem ready to time" in w and "needs-build" in w for w in waits)
    assert "2 builds pending" in waits[0]


def test_order_is_kept_among_ready_groups() -> None:
    names = [f"p{i}" for i in range(5)]
    groups = Groups([_group(n) for n in names], {})
    assert [groups.take()[0].problem_id for _ in names] == names  # type: ignore[index]


def test_builds_go_in_from_both_ends_after_the_first_groups() -> None:
    """The groups timed first are built first; then the back of the list (a release's level 3, slow to
    build) alternates with the front, so its builds run while the devices time the front."""
    assert build_order(list(range(12)), lead=4) == [0, 1, 2, 3, 4, 11, 5, 10, 6, 9, 7, 8]
    assert build_order(list(range(3)), lead=8) == [0, 1, 2]
    assert build_order([], lead=2) == []
    items = list(range(50))
    assert sorted(build_order(items)) == items  # every group once


def test_a_device_loads_at_least_one_candidate_ahead(tmp_path: Path) -> None:
    from cudal1.evaluator import EvalConfig, evaluate_many

    problem, cands = _group("p")
    with pytest.raises(ValueError, match="ahead=0"):
        evaluate_many([problem], cands, EvalConfig(), results_path=tmp_path / "r.jsonl", ahead=0)


def test_device_queue_looks_two_candidates_ahead_across_a_problem_end() -> None:
    started: list[str] = []
    queue = _queue(Groups([_group("a", 3), _group("b", 1), _group("c", 2)], {}), started)
    current = queue.next()
    assert current is not None and current[0].problem_id == "a" and started == ["a"]
    assert [c.candidate_id for _p, c, _f in queue.coming(current, 0)] == ["a.1", "a.2"]
    assert started == ["a"]  # nothing taken early while the current group has two more
    coming = queue.coming(current, 1)
    assert [c.candidate_id for _p, c, _f in coming] == ["a.2", "b.0"]
    assert coming[1][2].result() == "reference of b" and started == ["a", "b"]  # b's reference starts
    assert [c.candidate_id for _p, c, _f in queue.coming(current, 2)] == ["b.0", "c.0"]
    assert started == ["a", "b", "c"]  # each taken group's reference started once
    assert [g[0].problem_id for g in (queue.next(), queue.next())] == ["b", "c"]  # type: ignore[index]
    assert queue.next() is None


def test_device_queue_takes_no_group_early_that_waits_for_a_build() -> None:
    build: Future[str] = Future()
    slow = _group("needs-build")
    queue = _queue(Groups([_group("a", 1), slow], {slow[1][0].sha256: build}), [])
    current = queue.next()
    assert current is not None
    assert queue.coming(current, 0) == []  # the next group is not ready: nothing to get ready, no waiting
    build.set_result("")
    assert [c.candidate_id for _p, c, _f in queue.coming(current, 0)] == ["needs-build.0"]


def test_device_queue_depth_three_sees_a_whole_reproduction_row() -> None:
    """A reproduction row is a program and its three baselines: at the program, all three are in view."""
    queue = _queue(Groups([_group("a", 4), _group("b", 4)], {}), [], depth=3)
    current = queue.next()
    assert current is not None
    assert [c.candidate_id for _p, c, _f in queue.coming(current, 0)] == ["a.1", "a.2", "a.3"]
    assert [c.candidate_id for _p, c, _f in queue.coming(current, 2)] == ["a.3", "b.0", "b.1"]


def _run_ahead(loader: ThreadPoolExecutor, discarded: list[str], reference_loads: list[object],
               building: set[str]) -> RunAhead[str]:
    return RunAhead(lambda p, c: f"worker {c.candidate_id}",
                    lambda w, f: {"ok": True, "worker": w, "reference": f.result()},
                    lambda f: reference_loads.append(f.result()),
                    lambda c: c.candidate_id not in building, loader, discard=discarded.append)


def test_run_ahead_loads_the_candidates_in_view_as_one_batch() -> None:
    """The next candidate not yet loading sends every started one in view its load, and the coming
    problems' references theirs, at once; while the batch lasts nothing more is sent."""
    a, b = _group("a", 4), _group("b", 2)
    fa, fb = _done("ref a"), _done("ref b")
    discarded: list[str] = []
    reference_loads: list[object] = []
    with ThreadPoolExecutor(max_workers=6) as loader:
        ahead = _run_ahead(loader, discarded, reference_loads, set())
        waits = ahead.prepare([(a[0], c, fa) for c in a[1][1:4]], a[0])
        assert [w.result()["worker"] for w in waits] == ["worker a.1", "worker a.2", "worker a.3"]
        assert [w.cudal1_label for w in waits] == [f"load of a candidate a.{i}" for i in (1, 2, 3)]
        first = ahead.take(a[1][1])
        assert first is not None and first.loaded is waits[0]
        # a.2 was loaded by the batch: nothing new is sent, and only loads already done are waited for
        waits = ahead.prepare([(a[0], a[1][2], fa), (a[0], a[1][3], fa), (b[0], b[1][0], fb)], a[0])
        assert all(w.done() for w in waits) and len(waits) == 2 and reference_loads == []
        assert ahead.started[id(b[1][0])].loaded is None  # started, not loaded: the batch is not spent
        ahead.take(a[1][2])
        ahead.take(a[1][3])
        # a.3 is timed next, then b: a new batch with b's reference, sent once
        waits = ahead.prepare([(b[0], b[1][0], fb), (b[0], b[1][1], fb)], a[0])
        assert sorted(w.cudal1_label for w in waits) == ["load of b candidate b.0", "load of b candidate b.1",
                                                         "reference of b"]
        for w in waits:
            w.result()
        assert reference_loads == ["ref b"]
        ahead.prepare([(b[0], b[1][1], fb)], a[0])
        assert reference_loads == ["ref b"] and discarded == ["worker b.0"]  # b.0 left the view: let go
        ahead.clear()
    assert discarded == ["worker b.0", "worker b.1"] and ahead.started == {}


def test_run_ahead_leaves_out_of_a_batch_the_later_workers_still_starting() -> None:
    """The next candidate is loaded whether its worker has started or not (its turn comes next); a later
    one only once its start is over, so timing never waits for a torch.compile start further ahead. It
    goes with the next batch."""
    a = _group("a", 4)
    fa = _done("ref a")
    starting = {"worker a.2"}
    with ThreadPoolExecutor(max_workers=4) as loader:
        ahead = RunAhead(lambda p, c: f"worker {c.candidate_id}", lambda w, f: {"ok": True, "worker": w},
                         lambda f: None, lambda c: True, loader, discard=lambda w: None,
                         ready=lambda w: w not in starting and w != "worker a.1")
        waits = ahead.prepare([(a[0], c, fa) for c in a[1][1:4]], a[0])
        assert sorted(w.result()["worker"] for w in waits) == ["worker a.1", "worker a.3"]  # a.1: next
        assert ahead.started[id(a[1][2])].loaded is None
        ahead.take(a[1][1])
        starting.clear()  # a.2 is the next now, in a new batch
        waits = ahead.prepare([(a[0], c, fa) for c in a[1][2:4]], a[0])
        assert sorted(w.result()["worker"] for w in waits) == ["worker a.2", "worker a.3"]
        ahead.clear()


def test_run_ahead_waits_for_a_build_before_starting_and_lets_go_of_the_rest() -> None:
    a, b = _group("a", 3), _group("b", 1)
    fa, fb = _done("ref a"), _done("ref b")
    discarded: list[str] = []
    reference_loads: list[object] = []
    building = {"a.2"}
    with ThreadPoolExecutor(max_workers=4) as loader:
        ahead = _run_ahead(loader, discarded, reference_loads, building)
        waits = ahead.prepare([(a[0], a[1][1], fa), (a[0], a[1][2], fa)], a[0])
        assert sorted(ahead.started) == [id(a[1][1])]  # a.2 may not start yet (say, its build runs)
        assert [w.result() for w in waits] == [{"ok": True, "worker": "worker a.1", "reference": "ref a"}]
        taken = ahead.take(a[1][1])
        assert taken is not None and taken.worker == "worker a.1" and taken.loaded is waits[0]
        assert ahead.take(a[1][1]) is None  # once taken, the caller's
        building.clear()
        waits = ahead.prepare([(a[0], a[1][2], fa), (b[0], b[1][0], fb)], a[0])
        assert len(waits) == 3 and sorted(ahead.started) == sorted([id(a[1][2]), id(b[1][0])])
        for w in waits:
            w.result()
        assert reference_loads == ["ref b"]
        waits = ahead.prepare([(b[0], b[1][0], fb)], a[0])  # a.2 skipped (say, its reference failed)
        assert discarded == ["worker a.2"] and reference_loads == ["ref b"]  # b's reference is not loaded twice
        ahead.clear()
    assert discarded == ["worker a.2", "worker b.0"] and ahead.started == {}


def test_run_ahead_drops_a_candidate_whose_reference_failed() -> None:
    a = _group("a", 2)
    discarded: list[str] = []
    with ThreadPoolExecutor(max_workers=1) as loader:
        ahead: RunAhead[str] = RunAhead(lambda p, c: c.candidate_id, lambda w, f: {}, lambda f: None,
                                        lambda c: True, loader, discard=discarded.append)
        ahead.prepare([(a[0], c, _done("ref")) for c in a[1]], a[0])
        ahead.drop(a[1][0])
        ahead.drop(a[1][0])  # dropped already: nothing more to let go
    assert discarded == ["a.0"] and list(ahead.started) == [id(a[1][1])]


def test_timing_waits_for_the_loads_ahead_then_pauses_builds() -> None:
    load: Future[dict] = Future()
    threading.Timer(0.3, load.set_result, args=({},)).start()
    started = time.perf_counter()
    with quiet_after([load])() as info:
        assert load.done() and time.perf_counter() - started >= 0.2
        assert info == "a load ahead"  # the wait's length: the line above
        assert QUIET.depth == 1  # build workers are stopped while this is held
    assert QUIET.depth == 0


def test_the_wait_for_loads_ahead_is_booked_apart_from_timing() -> None:
    """A neighbour's slow load ahead delays the timing, and is reported as the wait, not as timing."""
    from cudal1.evaluator import EvalConfig
    from cudal1.evaluator.core import evaluate_candidate
    from cudal1.generation.templates import template_candidates
    from cudal1.problems import load_starter_suite

    problem = load_starter_suite()[0]
    [candidate] = template_candidates(problem, ["baseline"])

    def quiet_behind_a_slow_neighbour():  # its load ahead ends 1.5 s after the timing asks to start
        slow_neighbour: Future[dict] = Future()
        threading.Timer(1.5, slow_neighbour.set_result, args=({},)).start()
        return quiet_after([slow_neighbour])()

    config = EvalConfig(correctness_trials=1, timing_trials=3, target_trial_ms=5.0, warmup_iters=1, remeasure=0)
    result = evaluate_candidate(problem, candidate, config, quiet=quiet_behind_a_slow_neighbour)
    assert result.ok, result.reason
    assert result.extra["wait_s"] >= 1.0 > result.extra["timing_s"], result.extra
    assert result.extra["waited_for"] == "a load ahead"  # named by RunAhead.prepare in a batch


def test_a_batch_times_a_candidate_only_once_the_load_ahead_is_done() -> None:
    """In a real batch on the CPU the timing of the first candidate waits for the next one's slow load
    ahead (a 4 s import), booked as its wait; the slow candidate itself is loaded whole and measured."""
    from cudal1.candidates import Candidate, Status
    from cudal1.evaluator import EvalConfig
    from cudal1.evaluator.batch import evaluate_many
    from cudal1.problems import load_starter_suite

    first, second = load_starter_suite()[:2]
    candidates = [Candidate(first.problem_id, first.source.replace("class Model", "class ModelNew")),
                  Candidate(second.problem_id, "import time\ntime.sleep(4.0)\n"
                            + second.source.replace("class Model", "class ModelNew"))]
    config = EvalConfig(device="cpu", correctness_trials=2, timing_trials=3, target_trial_ms=5.0, remeasure=0,
                        recheck_above=None, static_checks=False)
    results = {e.problem_id: e for e in evaluate_many([first, second], candidates, config, ahead=1)}
    assert all(e.status is Status.OK for e in results.values()), [e.reason for e in results.values()]
    assert results[first.problem_id].extra["wait_s"] >= 2.0, results[first.problem_id].extra  # less its own checks
    assert results[second.problem_id].speedup is not None


def test_device_queue_release_closes_the_references_taken_early_and_starts_them_again() -> None:
    """Before a retry alone: the references loaded ahead for the coming problems hold device memory
    (L2-34's reference ran out beside them, retried alone or not); they go, and start again unloaded."""
    closed: list[str] = []

    class Session:
        def __init__(self, name: str) -> None:
            self.name = name

        def close(self) -> None:
            closed.append(self.name)

    starts: list[str] = []

    def start(problem: Problem) -> Future:
        starts.append(problem.problem_id)
        return _done(Session(f"{problem.problem_id} #{starts.count(problem.problem_id)}"))

    queue = DeviceQueue(Groups([_group("a", 1), _group("b", 1), _group("c", 1)], {}), start, 2)
    current = queue.next()
    assert current is not None
    queue.coming(current, 0)  # b and c taken early, their references started
    queue.release()
    assert closed == ["b #1", "c #1"] and starts == ["a", "b", "c", "b", "c"]
    assert [g[2].result().name for g in queue.taken] == ["b #2", "c #2"]


def test_a_worker_that_never_starts_is_the_harness_failure_not_the_program() -> None:
    """A candidate's worker that does not finish its start (stopped, starved of CPU) has run none of the
    program: six H200 evaluations were recorded as the program's timeout that way and kept as verdicts.
    Now the failure names the harness, so a resumed batch measures the candidate again."""
    from cudal1.candidates import harness_failed
    from cudal1.evaluator.config import EvalConfig
    from cudal1.evaluator.core import load_candidate
    from cudal1.evaluator.process import WorkerFailure

    class NeverReady:  # what load_candidate asks of a WorkerProcess before the load command
        def wait_ready(self, timeout_s: float) -> None:
            raise WorkerFailure("timeout", f"start exceeded {timeout_s:g} s; the process group was killed")

        def call(self, msg: dict, timeout_s: float) -> dict:
            raise AssertionError("the load command must not be sent to a worker that never started")

    with pytest.raises(WorkerFailure) as failure:
        load_candidate(NeverReady(), 0, EvalConfig(device="cpu"))  # type: ignore[arg-type]
    assert failure.value.kind == "timeout" and "start exceeded" in failure.value.message
    assert harness_failed(failure.value.kind, failure.value.message)


def test_a_worker_says_without_waiting_whether_its_start_is_over(tmp_path: Path) -> None:
    """WorkerProcess.is_ready never blocks: False while the worker starts, True once its ready line came
    (which wait_ready then consumes), and the next reply read is the next command's."""
    from cudal1.evaluator.process import WorkerProcess, WorkerSpec

    with WorkerProcess(WorkerSpec(device="cpu", memory_limit_mb=4096), tmp_path / "w", "ready") as worker:
        t0 = time.perf_counter()
        first = worker.is_ready()
        assert time.perf_counter() - t0 < 0.5
        deadline = time.monotonic() + 120
        while not worker.is_ready():
            assert time.monotonic() < deadline, worker.log_tail()
            time.sleep(0.05)
        assert worker.is_ready() and isinstance(first, bool)
        worker.wait_ready(5)
        reply = worker.call({"cmd": "probe", "out_path": str(worker.workdir / "probe.pt")}, 60)
        assert "ok" in reply and reply["nonce"]  # its answer to this command (call checks the nonce)


def test_a_gpu_workers_start_runs_away_from_every_timed_core(monkeypatch: pytest.MonkeyPatch) -> None:
    """A GPU worker starts (CUDA context, torch.compile's start) on cores that no device's timed workers
    use, then moves to its own timed core: starts run while other candidates are timed."""
    import os

    from cudal1.evaluator import sandbox

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    monkeypatch.setattr(os, "nice", lambda increment: 0)  # a timed worker, not a build worker at nice 19
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    timed = {sandbox.timed_core(f"cuda:{i}") for i in range(8)}
    start = sandbox.spare_cores()
    assert timed == set(range(8, 16)) and start == set(range(8)) and not timed & start
    assert sandbox.timed_core("cpu", core=3) == 3  # a CPU device: the core the parent names


def test_builds_pause_for_timing_and_keep_to_the_spare_cores() -> None:
    """A build worker is stopped while a device times (QUIET); on a GPU's host its cores are the spare
    ones (none named on a CPU device)."""
    from cudal1.evaluator import builds
    from cudal1.evaluator.config import EvalConfig

    worker = object()
    with QUIET.holding(worker):  # type: ignore[arg-type]
        assert worker in QUIET.workers
    assert worker not in QUIET.workers
    assert builds._build_cores(EvalConfig(device="cpu")) == ()


def test_a_device_waiting_for_builds_lets_every_pending_build_go_on_a_gpu_host() -> None:
    """Groups.take, blocked with no group ready, lets every pending build go on while another device times
    (QUIET.letting_go), the later groups' too, and holds them again once a group is taken; not on a CPU
    device."""
    slow, later = _group("needs-build"), _group("needs-build-later")
    sha, later_sha = slow[1][0].sha256, later[1][0].sha256
    for let_go in (True, False):
        build: Future[str] = Future()
        groups = Groups([slow, later], {sha: build, later_sha: Future()}, let_go=let_go)
        seen: list[tuple[bool, bool]] = []

        def finish(build: Future[str] = build, seen: list[tuple[bool, bool]] = seen) -> None:
            seen.append((QUIET.free[sha] > 0, QUIET.free[later_sha] > 0))
            build.set_result("")

        threading.Timer(0.3, finish).start()
        assert groups.take()[0].problem_id == "needs-build"  # type: ignore[index]
        assert seen == [(let_go, let_go)] and QUIET.free[sha] == 0 and QUIET.free[later_sha] == 0


def test_a_worker_closed_twice_closes_once(tmp_path: Path) -> None:
    """The scheduler's release closes a reference taken early and its session may close it again: the
    second close is a no-op, not an EBADF from draining a closed descriptor socket (it stopped a GPU run)."""
    import socket

    from cudal1.evaluator.process import WorkerProcess, WorkerSpec

    worker = WorkerProcess(WorkerSpec(device="cpu", memory_limit_mb=4096), tmp_path / "w", "reference")
    worker.fd_sock, peer = socket.socketpair(socket.AF_UNIX)  # a CUDA worker's descriptor socket
    worker.close()
    worker.close()
    peer.close()
    assert worker.proc.poll() is not None and worker.fd_sock.fileno() == -1
