"""Contended trials on a shared CPU (cudal1/evaluator/timing.py): the kernel's run-queue accounting
read from /proc, and an evaluation whose timed workers share their core with a busy process."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cudal1.candidates import Candidate, Status
from cudal1.evaluator import EvalConfig, evaluate_candidate
from cudal1.evaluator.timing import external_wait_s, sample
from cudal1.evaluator.workers import cpu_core_for
from cudal1.problems import Problem

FIXTURES = Path(__file__).parent / "fixtures"
needs_proc = pytest.mark.skipif(not Path(f"/proc/{os.getpid()}/task").is_dir() or not hasattr(os, "sched_setaffinity"),
                                reason="needs Linux /proc schedstat and CPU affinity")


@needs_proc
def test_sample_reads_every_thread_and_counts_cpu_time() -> None:
    before = sample(os.getpid())
    assert before is not None and before.main == os.getpid() and os.getpid() in before.threads
    # 50 ms of this thread's CPU time, however long a loaded machine takes to give it (a 50 ms wall-clock
    # loop got 16.9 ms of a core under CI's three test workers on two cores)
    cpu, deadline = time.thread_time(), time.perf_counter() + 30
    while time.thread_time() - cpu < 0.05 and time.perf_counter() < deadline:
        pass
    after = sample(os.getpid())
    assert after is not None
    spent_ns = after.threads[os.getpid()][0] - before.threads[os.getpid()][0]
    assert spent_ns > 20_000_000, spent_ns  # /proc counts in clock ticks: at least 20 of the 50 ms
    assert external_wait_s(before, before) == 0.0 and external_wait_s(None, after) == 0.0
    assert sample(2**22 + 12345) is None  # no such process


@needs_proc
def test_a_busy_neighbour_on_the_timed_core_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process spinning on the core the timed workers share makes them wait about half of every batch:
    every trial is contended, so the evaluation says so ("contended", "noisy") instead of passing off a
    number measured in the neighbour's time slices as a clean one."""
    problem = Problem("contention-matmul", 1, "matmul", (FIXTURES / "problems" / "matmul.py").read_text(),
                      suite="adversarial")
    config = EvalConfig(device="cpu", correctness_trials=2, timing_trials=3, remeasure=1, target_trial_ms=10,
                        run_timeout_s=20, memory_limit_mb=4096)
    monkeypatch.setenv("CUDAL1_TIMING_TRACE", "1")  # per-trial rows, with the waits the verdict rests on
    core = cpu_core_for(problem, config)
    if core is None:
        pytest.skip("one core only: the timed workers are not pinned")
    spinner = subprocess.Popen([sys.executable, "-c", f"import os; os.sched_setaffinity(0, {{{core}}})\nwhile True: pass"])
    try:
        time.sleep(0.2)  # it is pinned and spinning
        source = problem.source.replace("class Model(", "class ModelNew(")
        evaluation = evaluate_candidate(problem, Candidate(problem.problem_id, source, origin="control"), config)
    finally:
        spinner.kill()
        spinner.wait()
    assert evaluation.status is Status.OK, evaluation.reason
    assert {"contended", "noisy"} <= set(evaluation.flags), evaluation.flags
    # Timed up to the ceiling (3 trials, remeasure 1: 6) without three clean ones. Not always all six: a
    # worker that wakes may run a whole 10 ms batch before the spinner gets the core back (CI saw 5 of 6).
    contended = evaluation.extra["contended_trials"]
    assert 4 <= contended <= 6, evaluation.extra
    assert evaluation.trials == 3  # the least contended three are measured from
    trace = evaluation.extra["trace"]
    waited = [max(t["ref_wait_ms"] / t["ref_wall_s"], t["cand_wait_ms"] / t["cand_wall_s"]) > 100 for t in trace]
    assert len(trace) == 6 and sum(waited) >= 4, trace  # over 10% of a batch (ms over s: 100)
    # A neighbour that is not the candidate's is load, not an attack: the candidate's process stayed idle
    # while the reference was timed, so nothing is rejected for it.
    assert evaluation.extra["candidate_idle_cpu_ms"] < 0.25 * 10, evaluation.extra


def test_process_cpu_counts_every_thread_of_the_process_and_nothing_unknown() -> None:
    from cudal1.evaluator.timing import ThreadTimes, process_cpu_s

    before = ThreadTimes(7, {7: (1_000_000, 0), 8: (0, 0)})
    assert process_cpu_s(before, ThreadTimes(7, {7: (2_000_000, 5), 8: (4_000_000, 0), 9: (1_000_000, 0)})) == 0.006
    assert process_cpu_s(before, None) == 0.0 and process_cpu_s(before, ThreadTimes(8, {8: (9, 9)})) == 0.0


@needs_proc
def test_a_candidate_that_spins_while_the_reference_is_timed_is_seen_or_rejected() -> None:
    """A candidate whose hidden thread (``_thread``, which ``threading`` does not count) spins whenever the
    candidate is not being called would take the core it shares with the reference. Without the static
    layer, which rejects its ``vars()``, the parent sees the candidate's process on the CPU over the
    reference's warm-up, while it is idle, and rejects it; stopped for the reference's batch it gains
    nothing if unseen. An honest candidate's process uses none."""
    problem = Problem("spin-diag", 1, "diag_matmul", (FIXTURES / "problems" / "diag_matmul.py").read_text(),
                      suite="adversarial")
    config = EvalConfig(device="cpu", correctness_trials=2, timing_trials=3, target_trial_ms=10, run_timeout_s=20,
                        memory_limit_mb=4096, static_checks=False)
    source = (FIXTURES / "hacks" / "reference_sabotage_spin_hidden.py").read_text()
    evaluation = evaluate_candidate(problem, Candidate(problem.problem_id, source, origin="fixture"), config)
    if evaluation.status is Status.OK:
        # Stopped for the reference's batches it gains nothing, and it is seen only in warm-ups that come 5 ms
        # or more after its last call (about half of them; two trials are needed): under load an evaluation
        # can end before two such warm-ups. It was seen spinning, and is not faster.
        assert evaluation.extra["candidate_idle_cpu_ms"] > 0.5 and (evaluation.speedup or 0) < 1.3, evaluation.extra
    else:
        assert evaluation.status is Status.REJECTED, (evaluation.status, evaluation.reason, evaluation.flags)
        assert "kept running on the CPU while the reference was" in evaluation.reason
    honest = problem.source.replace("class Model(", "class ModelNew(")
    control = evaluate_candidate(problem, Candidate(problem.problem_id, honest, origin="control"), config)
    assert control.status is Status.OK, control.reason
    assert control.extra["candidate_idle_cpu_ms"] < 0.5, control.extra


@needs_proc
def test_a_paused_worker_is_stopped_until_resumed_and_then_answers(tmp_path: Path) -> None:
    """The candidate's worker is stopped while the reference is timed (trials._time_reference): the
    kernel shows it stopped, and once resumed it answers its next command."""
    from cudal1.evaluator.process import WorkerProcess, WorkerSpec
    from cudal1.evaluator.sandbox import process_info

    with WorkerProcess(WorkerSpec(device="cpu", memory_limit_mb=4096), tmp_path / "w", "candidate") as worker:
        worker.wait_ready(120)

        def state() -> str:
            info = process_info(worker.pid)
            assert info is not None
            return info.state

        worker.pause()
        deadline = time.monotonic() + 5
        while state() != "T" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert state() == "T"
        worker.resume()
        reply = worker.call({"cmd": "quiet"}, 20)
        assert reply["ok"] and state() != "T", reply
        # asked to, the worker stops itself right after its reply, with no word from the parent
        assert worker.wait_stopped(timeout_s=0.05) is False  # running, waiting for a command
        reply = worker.call({"cmd": "quiet", "stop": True}, 20)
        assert reply["ok"] and worker.wait_stopped() is True and state() == "T", reply
        worker.resume()
        assert worker.call({"cmd": "quiet"}, 20)["ok"] and state() != "T"


@needs_proc
def test_the_candidate_is_drained_after_the_references_warm_up_and_stopped_right_before_its_batch(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Each trial's reference side runs: the reference's warm-up (the candidate idle and awake, its CPU
    read), the candidate's device drained (`quiet`), the candidate stopped, the reference's timed batch
    (its worker asked to wait for an idle device first, which it does on a GPU), the candidate resumed.
    Drained before the warm-up instead, a kernel a hidden thread queued during the warm-up would run on
    into the batch."""
    from cudal1.evaluator.process import WorkerProcess
    from cudal1.evaluator.references import ReferenceSession

    events: list[str] = []

    def recording(cls: type, name: str, label: str, only_cmd: str | None = None) -> None:
        original = getattr(cls, name)

        def wrapper(self, *args, **kwargs):  # noqa: ANN001, ANN202 - passes through
            if only_cmd is None or (args and isinstance(args[0], dict) and args[0].get("cmd") == only_cmd):
                # a timed batch whose worker first waits for an idle device (timed.IdleDevice)
                idle = bool(args and isinstance(args[0], dict) and args[0].get("idle_device"))
                events.append(label + ("+idle" if idle else ""))
            return original(self, *args, **kwargs)
        monkeypatch.setattr(cls, name, wrapper)

    recording(ReferenceSession, "warm", "ref-warm")
    recording(ReferenceSession, "time", "ref-time")
    recording(WorkerProcess, "call", "quiet", only_cmd="quiet")
    recording(WorkerProcess, "pause", "pause")
    recording(WorkerProcess, "resume", "resume")
    problem = Problem("order-diag", 1, "diag_matmul", (FIXTURES / "problems" / "diag_matmul.py").read_text(),
                      suite="adversarial")
    config = EvalConfig(device="cpu", correctness_trials=2, timing_trials=3, target_trial_ms=10, run_timeout_s=20,
                        memory_limit_mb=4096)
    honest = problem.source.replace("class Model(", "class ModelNew(")
    evaluation = evaluate_candidate(problem, Candidate(problem.problem_id, honest, origin="control"), config)
    assert evaluation.status is Status.OK, evaluation.reason
    starts = [i for i, e in enumerate(events) if e == "quiet"]
    assert len(starts) >= config.timing_trials, events
    for i in starts:
        assert events[i - 1:i + 4] == ["ref-warm", "quiet", "pause", "ref-time+idle", "resume"], events[max(0, i - 2):i + 5]
    assert events.count("ref-time+idle") == len(starts), events  # only the batches the candidate is stopped for


def test_a_device_kept_busy_after_the_stop_rejects_in_two_trials_and_an_idle_one_never() -> None:
    """The reference's worker waits for its device before its batch (timed.IdleDevice, on a GPU). A wait of
    tens of microseconds is the probe itself, a few milliseconds the evaluator's other workers; over
    timed.BUSY_MS it is work the candidate's stopped process left holding the device: one such trial
    may be a stray, two reject, whatever the CPU said."""
    from cudal1.evaluator.checks import Run, Verdict
    from cudal1.evaluator.timing import TrialPair
    from cudal1.evaluator.trials import _check_idle

    run = Run(None, None, EvalConfig(device="cpu"), None, None)  # type: ignore[arg-type]  # the checks read no worker
    for _ in range(20):
        _check_idle(run, TrialPair([1.0], [1.0], 0.02, 0.02, device_wait_ms=0.05))
    for _ in range(5):  # the evaluator's own workers on the device: an H200 release's waits reached 8.3 ms
        _check_idle(run, TrialPair([1.0], [1.0], 0.02, 0.02, device_wait_ms=8.3))
    _check_idle(run, TrialPair([1.0], [1.0], 0.02, 0.02, device_wait_ms=120.0))
    with pytest.raises(Verdict) as caught:
        _check_idle(run, TrialPair([1.0], [1.0], 0.02, 0.02, device_wait_ms=500.2))
    assert caught.value.status is Status.REJECTED and "device was still busy" in caught.value.reason
    assert "500.2 ms, in 2 trials" in caught.value.reason
