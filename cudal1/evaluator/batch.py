"""Many candidates: builds in parallel on the CPU cores while each device times one candidate at a
time; results appended to a parquet file as they finish, so an interrupted batch resumes where it
stopped (a candidate already measured under the same config on the same hardware is skipped)."""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import suppress
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cudal1.candidates import Candidate, Evaluation, load_evaluations, save_evaluations
from cudal1.evaluator import sandbox
from cudal1.evaluator.builds import header_beside, pin_cuda_arch
from cudal1.evaluator.config import EvalConfig
from cudal1.evaluator.core import load_candidate, static_verdict
from cudal1.evaluator.extensions import mentions_compile
from cudal1.evaluator.process import WorkerFailure, WorkerProcess
from cudal1.evaluator.recheck import (
    Twins,
    evaluate_guarded,
    expected_rechecks,
    out_of_memory,
    reference_failed,
)
from cudal1.evaluator.references import CLOSER, KeptReferences, ReferenceError, ReferenceSession
from cudal1.evaluator.schedule import (
    DeviceQueue,
    Group,
    Groups,
    RunAhead,
    compile_at_start,
    discard_worker,
    expected_costs,
    largest_first,
    quiet_after,
    submit_builds,
)
from cudal1.evaluator.static import screen, tunes_itself
from cudal1.evaluator.workers import (
    default_extensions_root,
    device_name,
    prepare_candidate_worker,
)
from cudal1.problems import Problem

log = logging.getLogger(__name__)

Progress = Callable[[Evaluation], None]
# Candidates a device gets ready ahead of the one it times, loaded in batches (schedule.RunAhead): three
# covers a reproduction row's baselines (two of them torch.compile loads of 5-7 s) in one batch. More would
# hold more problems' inputs on the device at once; a load that runs out of memory is retried alone.
AHEAD = 3
# Problems in a row whose evaluations all failed in the harness that stop a batch: the machine, not the
# candidates, is failing (a fork server whose children could not use CUDA recorded 792 "reference failed to
# start" evaluations in 31 s). Counted in problems: one problem's broken reference fails all its candidates.
HARNESS_STREAK = 5


class HarnessDown(RuntimeError):
    """Every recent evaluation failed in the harness: the batch stops rather than record more."""


class _Sink:
    """Thread-safe result collection, rewritten atomically to parquet after every evaluation."""

    def __init__(self, path: Path | None, existing: list[Evaluation], progress: Progress | None) -> None:
        self.path, self.rows, self.progress = path, list(existing), progress
        self.new: list[Evaluation] = []
        self.lock = threading.Lock()
        self.streak: list[str] = []  # the problems of the harness failures in a row

    def add(self, evaluation: Evaluation) -> None:
        self.add_all([evaluation])

    def add_all(self, evaluations: Sequence[Evaluation]) -> None:
        """Record evaluations with one rewrite of the file (a batch's static verdicts come together)."""
        if not evaluations:
            return
        with self.lock:
            self.rows.extend(evaluations)
            self.new.extend(evaluations)
            if self.path is not None:
                tmp = self.path.with_name(self.path.name + ".partial" + self.path.suffix)
                save_evaluations(self.rows, tmp)
                os.replace(tmp, self.path)
            for evaluation in evaluations:
                if not evaluation.harness_failed:
                    self.streak = []
                elif evaluation.problem_id not in self.streak:
                    self.streak.append(evaluation.problem_id)
            streak = len(self.streak)
        if self.progress is not None:
            for evaluation in evaluations:
                self.progress(evaluation)
        if streak >= HARNESS_STREAK:
            raise HarnessDown(f"the evaluations of {streak} problems in a row failed in the harness, not in "
                              f"their programs (kept, and measured again when the batch resumes); the last: "
                              f"{evaluations[-1].reason[:300]}")


def evaluate_many(
    problems: Sequence[Problem],
    candidates: Sequence[Candidate],
    config: EvalConfig,
    devices: Sequence[str] | None = None,
    results_path: str | Path | None = None,
    progress: Progress | None = None,
    *,
    build_workers: int | None = None,
    extensions_root: Path | None = None,
    costs: Mapping[str, float] | None = None,
    history: Sequence[Evaluation] | None = None,
    ahead: int = AHEAD,
    references: KeptReferences | None = None,
) -> list[Evaluation]:
    """Evaluate candidates against their problems on one or more devices; returns the new evaluations
    (with results_path, the file holds the earlier ones too). ``costs`` (seconds a candidate of each
    problem takes, by problem id; by default :func:`expected_costs` of what results_path already holds)
    orders the problems largest first, so on several devices the last problems handed out are short ones
    and the devices finish together. ``history``: earlier evaluations to take those costs from, and the
    candidates whose re-check above ``recheck_above`` to expect (recheck.Twins); by default what
    results_path holds. ``ahead``: candidates each device loads ahead of the one it times (:data:`AHEAD`).
    ``references``: problems' reference workers kept from earlier calls and for later ones (references.KeptReferences), as
    the learning stages' reward calls do; None starts and closes each problem's reference here."""
    if ahead < 1:
        raise ValueError(f"ahead={ahead}: a device loads at least the next candidate ahead (use 1 or more)")
    by_id = {p.problem_id: p for p in problems}
    unknown = sorted({c.problem_id for c in candidates} - set(by_id))
    if unknown:
        raise ValueError(f"candidates name problems that are not loaded: {unknown[:5]}; load the suite they came from")
    sandbox.reap_on_term()  # a SIGTERM (a timeout, a cancelled flow run) takes the workers and their builds along
    devices = list(devices or [config.device])
    path = Path(results_path) if results_path is not None else None
    # A harness failure says nothing about its candidate: measured again when a batch resumes (and replaced).
    every = load_evaluations(path) if path is not None else []
    existing = [e for e in every if not e.harness_failed]
    ext_root = extensions_root or default_extensions_root()
    if config.is_cuda:
        pin_cuda_arch(devices)
    sink = _Sink(path, existing, progress)
    todo = _unsettled(candidates, by_id, config, devices, {e.key for e in existing}, sink)
    if not todo:
        return sink.new
    order: dict[str, list[Candidate]] = {}
    for c in todo:
        order.setdefault(c.problem_id, []).append(c)
    history = every if history is None else history
    ordered = largest_first(list(order.items()), expected_costs(history) if costs is None else costs)
    # Builds in submission order on all cores but those the timing path needs (the parent and the two
    # workers of each device), at the lowest CPU priority, overlapping the timing of what needs no build.
    workers = build_workers or max(1, (os.cpu_count() or 2) - 1 - 2 * len(devices))
    _run_devices(ordered, by_id, config, devices, ext_root, sink,
                 _Options(ahead, expected_rechecks(history, config), references, workers))
    return sink.new


def _unsettled(candidates: Sequence[Candidate], by_id: Mapping[str, Problem], config: EvalConfig,
               devices: list[str], done: set[tuple], sink: _Sink) -> list[Candidate]:
    """The candidates still to evaluate: not measured already under this config on this hardware, and not
    settled by the static checks, whose verdicts are recorded here first (no worker, build or device time)."""
    todo = [c for c in candidates
            if (by_id[c.problem_id].sha256, c.sha256, config.hash, device_name(devices[0])) not in done]
    cfg0 = config.with_device(devices[0])
    settled = [(c, static_verdict(by_id[c.problem_id], c, cfg0)) for c in todo]
    sink.add_all([verdict for _, verdict in settled if verdict is not None])
    return [c for c, verdict in settled if verdict is None]


@dataclass(frozen=True)
class _Options:
    """What each device loop of a batch is given beside its groups (evaluate_many's arguments)."""

    ahead: int  # candidates loaded ahead of the one timed
    rechecks: set[str]  # source hashes whose re-check is expected (recheck.Twins)
    references: KeptReferences | None  # references kept between batches
    build_workers: int  # builds at once


def _run_devices(ordered: list[tuple[str, list[Candidate]]], by_id: Mapping[str, Problem], config: EvalConfig,
                 devices: list[str], ext_root: Path, sink: _Sink, options: _Options) -> None:
    """The batch's builds, its precompiled header and one loop per device (:class:`_DeviceLoop`), until every
    problem of ``ordered`` (its id and candidates, in order) is evaluated; raises if a device loop stopped
    (what was evaluated is in ``sink``)."""
    todo = [c for _pid, cands in ordered for c in cands]
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="cudal1-pch") as beside, \
            ThreadPoolExecutor(max_workers=options.build_workers) as pool:
        done_evaluating = threading.Event()  # ends the precompiled header's compile if still running
        header = header_beside(beside, todo, ext_root, config, done_evaluating)  # (toolchain.py)
        if header is not None:
            header.add_done_callback(_log_header)
        builds = submit_builds(pool, ordered, by_id, config, devices, ext_root)
        groups = Groups([(by_id[pid], cands) for pid, cands in ordered], builds, let_go=config.is_cuda)
        errors: list[BaseException] = []

        def run_device(device: str) -> None:
            try:
                _DeviceLoop(device, groups, builds, config, ext_root, sink, options.ahead, Twins(options.rechecks),
                            options.references).run()
            except BaseException as exc:  # surfaced below: a dead device loop must not end the batch quietly
                errors.append(exc)
                groups.close()
                pool.shutdown(wait=False, cancel_futures=True)  # builds not started yet are not needed now

        threads = [threading.Thread(target=run_device, args=(d,), name=f"cudal1-eval-{d}", daemon=True)
                   for d in devices]
        try:
            with CLOSER.active():  # workers close beside the device loops, and are all gone at the end
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
        finally:  # no build is left to use the header: the batch does not wait for it (prebuild_header)
            done_evaluating.set()
        if errors:
            where = f" in {sink.path}" if sink.path else ""
            raise RuntimeError(f"the evaluation loop stopped after {len(sink.new)} evaluations (kept{where}; run "
                               f"again to resume): {type(errors[0]).__name__}: {errors[0]}") from errors[0]


def _log_header(done: Future[tuple[str, float]]) -> None:
    message, wall = done.result()
    (log.warning if message.startswith("error") else log.info)("precompiled torch header (%.1f s): %s", wall, message)


class _DeviceLoop:
    """One device, one candidate timed at a time. What comes next gets ready while the current candidate
    is checked, off the critical path: the workers of the next ``ahead`` candidates (and the reference
    workers of their problems) start, and load in batches (import, cached build, construct). Process
    start-up puts almost nothing on the device; loading does, so timing waits until the loads sent are
    done: nothing else of the batch runs on the device while a candidate is timed
    (build-worker warm-ups aside, see prebuild). The order comes from :mod:`cudal1.evaluator.schedule`;
    this class wires it to the evaluator and records each result."""

    def __init__(self, device: str, groups: Groups, builds: dict[str, Future[tuple[str, float]]], config: EvalConfig,
                 ext_root: Path, sink: _Sink, ahead: int = AHEAD, twins: Twins | None = None,
                 references: KeptReferences | None = None) -> None:
        self.groups, self.builds, self.ahead, self.twins = groups, builds, ahead, twins or Twins(set())
        self.references = references
        self.cfg, self.ext_root, self.sink = config.with_device(device), ext_root, sink
        self.release_ahead: Callable[[], None] = lambda: None  # the references taken early go (DeviceQueue.release)
        # Workers started ahead for programs that tune themselves (static.tunes_itself): their loads ahead
        # make no first call. Started on the loop's thread, loaded on the loader's. Weak, not by id(): a
        # worker let go unloaded would leave its id behind for a later worker to reuse.
        self.tuning_alone: weakref.WeakSet[WorkerProcess] = weakref.WeakSet()

    def run(self) -> None:
        with ThreadPoolExecutor(max_workers=2) as starter, ThreadPoolExecutor(max_workers=2 * self.ahead) as loader:
            queue = DeviceQueue(self.groups, lambda problem: starter.submit(self._start_reference, problem), self.ahead)
            self.release_ahead = queue.release
            ahead: RunAhead[WorkerProcess] = RunAhead(self._start_ahead, self._load_ahead, self._load_reference,
                                                      self._startable, loader, discard_worker,
                                                      ready=WorkerProcess.is_ready)
            started = time.perf_counter()
            current = queue.next()
            while current is not None:
                self._group(current, queue, ahead, time.perf_counter() - started)
                started = time.perf_counter()
                current = queue.next()
            ahead.clear()

    def _group(self, group: Group, queue: DeviceQueue, ahead: RunAhead[WorkerProcess], waited_s: float) -> None:
        """One problem's candidates, in order, against its reference; all recorded as reference failures
        when the reference does not load. ``waited_s``: how long the device waited for a group whose
        builds were done."""
        problem, cands, session_future = group
        t0 = time.perf_counter()
        if cands:
            first, *coming = self.twins.around([(problem, cands[0], session_future), *queue.coming(group, 0)])
            ahead.start_group(first, coming)
        session = _loaded(session_future)
        # The device's time outside any evaluation, booked on the evaluation it came before: on two GPUs the
        # evaluations summed to as little as half of the devices' wall.
        idle = {"group_wait_s": waited_s, "reference_wait_s": time.perf_counter() - t0}
        if isinstance(session, str):
            for c in cands:
                self.sink.add(reference_failed(problem, c, self.cfg, session))
                ahead.drop(c)
            return
        clean = True  # no harness failure among the problem's evaluations: its reference may be kept
        try:
            for i, c in enumerate(cands):
                t0 = time.perf_counter()
                # its build's own wall in the batch's pool, pauses included (builds.timed_prebuild)
                built = {"prebuild_s": self.builds[c.sha256].result()[1]} if c.sha256 in self.builds else {}
                t1 = time.perf_counter()
                mine = ahead.take(c)
                worker = mine.worker if mine is not None else self._start_worker(problem, c)
                loaded = mine.loaded if mine is not None else None
                # the coming candidates, with a second worker of each (this one's too) whose re-check is expected
                waits = ahead.prepare(self.twins.around(queue.coming(group, i), (problem, c, session_future)), problem)
                idle |= {"build_wait_s": t1 - t0, "prepare_s": time.perf_counter() - t1}
                result = self._measure(problem, c, session, ahead, waits, prepared=worker, loaded=loaded)
                # the device loop's whole time on the candidate, re-measurements included (expected_costs)
                idle["row_s"] = time.perf_counter() - t1
                self.sink.add(replace(result, extra=result.extra | {k: round(v, 3) for k, v in idle.items()} | built))
                idle = {}
                clean = clean and not result.harness_failed
        except BaseException:
            session.close_beside()
            raise
        if not (clean and self.references is not None and self.references.give(session)):
            session.close_beside()

    def _measure(self, problem: Problem, c: Candidate, session: ReferenceSession, ahead: RunAhead[WorkerProcess],
                 waits: list[Future], **prepared: Any) -> Evaluation:
        """The candidate's evaluation, timed once the loads ahead are done, with builds paused."""
        twin = self.twins.of(c)
        result = evaluate_guarded(problem, c, self.cfg, session, self.ext_root,
                          quiet=quiet_after(waits, self.cfg.device),
                          ready=lambda: ahead.take(twin) if twin is not None else None, **prepared)
        if out_of_memory(result):
            # Workers running ahead hold device memory too (a large problem's reference ran out beside them):
            # once more with nothing ahead, before the failure is recorded.
            wait(waits)
            ahead.clear()
            self.release_ahead()
            if self.references is not None:
                self.references.close()  # the references kept idle for later batches hold device memory too
            CLOSER.wait(self.cfg.device)  # and the workers still closing have given theirs back (references.CLOSER)
            result = evaluate_guarded(problem, c, self.cfg, session, self.ext_root, quiet=quiet_after([], self.cfg.device))
            result = replace(result, flags=tuple(sorted(set(result.flags) | {"retried_alone"})))
        return result

    def _start_reference(self, problem: Problem) -> ReferenceSession | str:
        """The problem's reference worker, started but not loaded (or kept warm from an earlier batch:
        ``references``); its failure as a message."""
        kept = self.references.take(problem, self.cfg) if self.references is not None else None
        if kept is not None:
            return kept
        try:
            return ReferenceSession(problem, self.cfg, load=False)
        except (ReferenceError, WorkerFailure) as exc:
            return str(exc)

    def _start_worker(self, problem: Problem, c: Candidate) -> WorkerProcess:
        return prepare_candidate_worker(problem, c, self.cfg, self.ext_root)

    def _start_ahead(self, problem: Problem, c: Candidate) -> WorkerProcess:
        """A coming candidate's worker; a torch.compile program's makes torch.compile's start (seconds) before
        its load. Like every GPU worker's start, it runs on cores no device times on (worker_main): it
        used to run on its device's timed core, stopped while any device timed, and on two H200s such
        starts were still running when their loads were due."""
        warm = compile_at_start(self.cfg) and mentions_compile(c.source)
        worker = prepare_candidate_worker(problem, c, self.cfg, self.ext_root, warm_compile=warm)
        if tunes_itself(screen(c.source)[1]):
            self.tuning_alone.add(worker)  # its first call waits for its turn (core._first_call_alone)
        return worker

    def _load_ahead(self, worker: WorkerProcess, future: Future) -> dict:
        session = future.result()
        if isinstance(session, str):
            return {"ok": False, "error": session}
        alone = worker in self.tuning_alone
        self.tuning_alone.discard(worker)
        return load_candidate(worker, session.init_seed, self.cfg, first_call=not alone)

    def _load_reference(self, future: Future) -> None:
        """Load a coming problem's reference ahead; a failure is raised again when its turn comes."""
        session = future.result()
        if not isinstance(session, str):
            with suppress(ReferenceError):
                session.load()  # a failure is raised again, and reported, when its turn comes

    def _startable(self, c: Candidate) -> bool:
        built = c.sha256 not in self.builds or self.builds[c.sha256].done()
        return built and not (self.cfg.static_checks and screen(c.source)[0])


def _loaded(future: Future) -> ReferenceSession | str:
    """The current problem's reference, loaded (a no-op when loaded ahead), or why it failed."""
    session = future.result()
    if not isinstance(session, str):
        try:
            session.load()
        except ReferenceError as exc:
            session = str(exc)
    return session
