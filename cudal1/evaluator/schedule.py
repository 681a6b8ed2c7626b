"""The schedule of one batch, by role: which problem a device takes next (:class:`Groups`, shared by the
devices; :class:`DeviceQueue`, one device's groups taken ahead), the workers of the coming candidates
started and loaded while the current one is checked (:class:`RunAhead`), and the pause of every build
while a device times (:func:`quiet_after`). Nothing here measures: the batch wires these to the
evaluator (cudal1.evaluator.batch)."""

from __future__ import annotations

import logging
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Executor, Future, wait
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, Generic, TypeVar

from cudal1.candidates import Candidate, Evaluation
from cudal1.evaluator.builds import QUIET, timed_prebuild
from cudal1.evaluator.config import EvalConfig
from cudal1.evaluator.extensions import mentions_builds, mentions_compile
from cudal1.evaluator.references import CLOSER, close_worker
from cudal1.evaluator.static import STATIC_KEY, screen
from cudal1.problems import Problem

Group = tuple[Problem, list[Candidate], Future]  # a problem, its candidates, its reference starting
Coming = tuple[Problem, Candidate, Future]  # a candidate to get ready, with its problem's reference
W = TypeVar("W")
T = TypeVar("T")
log = logging.getLogger(__name__)


class Groups:
    """Problems waiting for a device, ready ones first: a group whose candidates need no build (or whose
    builds are done) is timed while others still compile, instead of the device idling behind a build."""

    # A device that has waited this long for any group's builds says so, and again as often: a stall
    # behind builds (6 minutes of the reproduction's first calls)
    # otherwise shows as nothing at all.
    report_every_s = 60.0

    def __init__(self, groups: list[tuple[Problem, list[Candidate]]], builds: dict[str, Future[tuple[str, float]]],
                 let_go: bool = False) -> None:
        self.groups, self.builds, self.lock = list(groups), builds, threading.Lock()
        # A GPU host: a device waiting for a group lets every pending build go on beside the other
        # devices' timing (Quiet.letting_go). Not on a CPU device, whose timing shares the builds' cores.
        self.let_go = let_go

    def close(self) -> None:
        """Nothing more is handed out (a device loop died; the others finish their current group)."""
        with self.lock:
            self.groups.clear()

    def _ready(self, cands: list[Candidate]) -> bool:
        return all(c.sha256 not in self.builds or self.builds[c.sha256].done() for c in cands)

    def take(self, block: bool = True) -> tuple[Problem, list[Candidate]] | None:
        """The first ready group; without ``block``, None when none is ready yet. None when all are taken."""
        started = report = time.monotonic()
        while True:
            with self.lock:
                if not self.groups:
                    return None
                for i, (_problem, cands) in enumerate(self.groups):
                    if self._ready(cands):
                        return self.groups.pop(i)
                waiting = {c.sha256 for _p, cands in self.groups for c in cands
                           if c.sha256 in self.builds and not self.builds[c.sha256].done()}
                pending = [self.builds[sha] for sha in waiting]
                first = self.groups[0][0].problem_id
                # Every pending build, not only the first group's: the groups left all wait for builds, and
                # the builds that end a cold run are the ones still paused by another device's timing (on
                # two H100s the last group's build took 137 s in the batch against 73 s alone while both
                # devices waited for it).
                needed = waiting if self.let_go else set()
            if not block:
                return None
            with QUIET.letting_go(needed):
                wait(pending, timeout=min(1.0, self.report_every_s), return_when=FIRST_COMPLETED)
            if time.monotonic() - report >= self.report_every_s:
                report = time.monotonic()
                log.warning("no problem ready to time for %.0f s: %d builds pending (the next problem, %s, "
                            "waits for its own)", report - started, len(pending), first)


def expected_costs(evaluations: Sequence[Evaluation]) -> dict[str, float]:
    """Seconds a device is expected to spend on one candidate of each problem: the median over the
    problem's earlier evaluations (any candidate, any protocol) of the device loop's whole time on the
    candidate, re-measurements included (``row_s``), else its ``eval_s``. A release row re-checked above 3x
    costs two to three evaluations, and the row that ended two H100s' run last was such a row."""
    seen: dict[str, list[float]] = {}
    for e in evaluations:
        if e.extra.get(STATIC_KEY):
            continue  # settled by the static checks before any device loop (core.static_verdict): no device time
        cost = e.extra.get("row_s", e.eval_s)
        if isinstance(cost, (int, float)) and cost > 0:
            seen.setdefault(e.problem_id, []).append(float(cost))
    return {pid: statistics.median(costs) for pid, costs in seen.items()}


def largest_first(ordered: list[tuple[str, list[T]]], costs: Mapping[str, float]) -> list[tuple[str, list[T]]]:
    """Problems by expected device time, largest first (a problem's cost per candidate times its
    candidates), so on several devices the last problems handed out are short and the devices finish
    together. A problem with no estimate counts as the median of those with one; with no estimate at all,
    the order stays as given (a stable sort keeps ties in it too)."""
    if not costs:
        return list(ordered)
    typical = statistics.median(costs.values())
    return sorted(ordered, key=lambda item: -costs.get(item[0], typical) * len(item[1]))


def build_order(groups: list[T], lead: int = 8) -> list[T]:
    """The order to submit groups' builds in: the first ``lead`` groups (what the devices time first),
    then one from the front and one from the back in turn. A device times any group whose builds are
    done, so the back's builds (a release's level 3, whose two ``torch.compile`` baselines take minutes
    to build) run while the devices time the front, instead of after it with the devices idle: 15
    evaluations in a 540 s call that reached level 3 of the reproduction on an H100."""
    order, rest = list(groups[:lead]), deque(groups[lead:])
    front = True
    while rest:
        order.append(rest.popleft() if front else rest.pop())
        front = not front
    return order


class DeviceQueue:
    """The groups one device has taken: the current one, then those taken early (only when ready) so
    that the next ``depth`` candidates can get ready across a problem's end. Each group's reference
    starts (``start_reference``, off the device loop) when the group is taken."""

    def __init__(self, groups: Groups, start_reference: Callable[[Problem], Future], depth: int = 3) -> None:
        self.groups, self.start_reference, self.depth = groups, start_reference, depth
        self.taken: deque[Group] = deque()  # after the current one

    def _take(self, block: bool) -> Group | None:
        taken = self.groups.take(block)
        if taken is None:
            return None
        return taken[0], taken[1], self.start_reference(taken[0])

    def next(self) -> Group | None:
        """The next group to time: one taken early, else the next ready one (waiting for it); None at the end."""
        return self.taken.popleft() if self.taken else self._take(block=True)

    def release(self) -> None:
        """The references of the groups taken early close (their device memory with them) and start again,
        not loaded: before a retry alone, as they hold memory like the workers ahead (L2-34's reference
        ran out of memory beside them)."""
        for k, (problem, cands, future) in enumerate(self.taken):
            close = getattr(future.result(), "close", None)  # a failure message has none
            if close is not None:
                close()
            self.taken[k] = (problem, cands, self.start_reference(problem))

    def coming(self, group: Group, i: int) -> list[Coming]:
        """The ``depth`` candidates after the group's i-th, taking the groups that are ready as needed."""
        problem, cands, future = group
        out = [(problem, c, future) for c in cands[i + 1:i + 1 + self.depth]]
        k = 0
        while len(out) < self.depth:
            if k == len(self.taken):
                taken = self._take(block=False)
                if taken is None:
                    break
                self.taken.append(taken)
            p, cs, f = self.taken[k]
            out += [(p, c, f) for c in cs[:self.depth - len(out)]]
            k += 1
        return out


# A worker started ahead that will not be used goes as an evaluation's worker does
discard_worker = close_worker


class Ahead(Generic[W]):
    """A coming candidate's worker, and its load once sent."""

    def __init__(self, worker: W) -> None:
        self.worker = worker
        self.loaded: Future[dict] | None = None


class RunAhead(Generic[W]):
    """The workers of the coming candidates (:meth:`DeviceQueue.coming`): started as they come into view
    (interpreter, torch, CUDA context), and loaded a batch at a time: when the next candidate has not been
    sent its load, it is, at once with every other candidate in view whose worker has started
    (``ready``), and with the references of the other problems among them. Timing waits for the loads,
    so a batch costs the device its longest load, not the sum: loaded one at a time, the reproduction's
    two torch.compile baselines of a row kept the device waiting 4.5-7.3 s each. ``start`` (synchronous),
    ``load`` and ``load_reference`` (run on ``loader``, which needs a thread per load of a batch) and
    ``discard`` are the evaluator's; ``startable`` says whether a candidate may start yet (its build done, its source not
    statically rejected)."""

    def __init__(self, start: Callable[[Problem, Candidate], W], load: Callable[[W, Future], dict],
                 load_reference: Callable[[Future], Any], startable: Callable[[Candidate], bool],
                 loader: Executor, discard: Callable[[Any], None] = discard_worker,
                 ready: Callable[[W], bool] = lambda worker: True) -> None:
        self.start, self.load, self.load_reference = start, load, load_reference
        self.startable, self.loader, self.discard, self.ready = startable, loader, discard, ready
        self.started: dict[int, Ahead[W]] = {}  # by id() of the candidate
        self.references: dict[int, Future] = {}  # loads of coming problems' references, by id() of their future

    def take(self, c: Candidate) -> Ahead[W] | None:
        """The candidate's worker started ahead, if any; it is the caller's from now on."""
        return self.started.pop(id(c), None)

    def drop(self, c: Candidate) -> None:
        """The candidate will not be timed (its reference failed): its worker, if started, goes."""
        if id(c) in self.started:
            self.discard(self.started.pop(id(c)).worker)

    def clear(self) -> None:
        """Every worker started ahead goes (before a retry alone, and at the end)."""
        for stale in list(self.started):
            self.discard(self.started.pop(stale).worker)
        self.references = {}

    def start_group(self, first: Coming, coming: list[Coming]) -> None:
        """A group's first candidate that nothing got ready ahead (a device's first group, or one after a
        retry alone): its worker starts and loads beside its reference's load, not after it. The first
        row of a run waited 2.2 s for its candidate once its reference was loaded."""
        if id(first[1]) not in self.started:
            self.prepare([first, *coming], first[0])

    def prepare(self, upcoming: list[Coming], problem: Problem) -> list[Future]:
        """Get ``upcoming`` ready while ``problem``'s current candidate runs: workers no longer coming go,
        the coming ones start, and a batch of loads is sent when the first has none yet. Returns the
        loads that timing must wait for."""
        for stale in set(self.started) - {id(u[1]) for u in upcoming}:
            self.discard(self.started.pop(stale).worker)
        for p, u, _f in upcoming:
            if id(u) not in self.started and self.startable(u):
                self.started[id(u)] = Ahead(self.start(p, u))
        coming = {id(f) for _p, _u, f in upcoming}
        self.references = {k: v for k, v in self.references.items() if k in coming}
        first = self.started.get(id(upcoming[0][1])) if upcoming else None
        if upcoming and (first is None or first.loaded is None):
            for k, (p, u, f) in enumerate(upcoming):
                ahead = self.started.get(id(u))
                # Beyond the next candidate, only workers whose start is over: timing waits for the batch,
                # and a torch.compile program's start (5-11 s) kept it waiting while the candidate in
                # hand was ready (39% of two H200s' time)
                if ahead is not None and ahead.loaded is None and (k == 0 or self.ready(ahead.worker)):
                    ahead.loaded = _labelled(self.loader.submit(self.load, ahead.worker, f),
                                             f"load of {u.problem_id} candidate {u.candidate_id}")
                if p is not problem and id(f) not in self.references:
                    self.references[id(f)] = _labelled(self.loader.submit(self.load_reference, f),
                                                       f"reference of {p.problem_id}")
        return [*(a.loaded for a in self.started.values() if a.loaded is not None), *self.references.values()]


def compile_at_start(config: EvalConfig) -> bool:
    """Whether a torch.compile program's worker started ahead makes torch.compile's start then: where spare
    cores run it beside other candidates' checks (a GPU's host). On a CPU device the same cores check and
    time: 123-125 s for the starter suite's eager and compile rewrites without it, 131-134 s with it."""
    return config.is_cuda


def _labelled(future: Future, label: str) -> Future:
    """A wait that says what it waits for: a long one is reported by name (quiet_after)."""
    future.cudal1_label = label  # type: ignore[attr-defined]
    return future


def quiet_after(waits: list[Future], device: str = "") -> Callable[[], AbstractContextManager[str | None]]:
    """The timing context of ``device``'s loop: first the loads running ahead and the device's workers still
    closing finish, then builds pause. It yields what ended the wait (a load's label), so an evaluation can
    report whose load a long wait was; None when nothing was still loading. The wait's length is the
    caller's to measure."""

    @contextmanager
    def quiet() -> Iterator[str | None]:
        last = None
        for future in waits:
            if not future.done():
                wait([future])
                last = getattr(future, "cudal1_label", "a load ahead")
        if CLOSER.wait(device):  # workers of this device still exiting (references.CLOSER)
            last = last or "workers closing"
        with QUIET():
            yield last

    return quiet


def submit_builds(pool: Executor, ordered: list[tuple[str, list[Candidate]]], by_id: Mapping[str, Problem],
                  config: EvalConfig, devices: Sequence[str], ext_root: Path) -> dict[str, Future[tuple[str, float]]]:
    """The builds of the candidates that need one, by source hash. Submitted by group, the first groups
    first: a group is timed once all its builds are done, so builds submitted in candidate order (every
    program, then every baseline) kept the reproduction's first group waiting ~6 minutes for a hundred
    unrelated programs' builds; then from both ends in turn
    (schedule.build_order). GPU warm-ups go to every device in turn (two at a time on each, see prebuild),
    not all to the first: the caches they fill serve the timed worker of whichever device takes the row."""
    builds: dict[str, Future[tuple[str, float]]] = {}
    for c in (c for _pid, cands in build_order(ordered) for c in cands):
        # A torch.compile program is warmed up by a build worker on a GPU, where Triton's compiles are
        # the cost; on a CPU the build worker's own compile costs as much as the one it would spare.
        needs_build = mentions_builds(c.source) or (config.is_cuda and mentions_compile(c.source))
        if needs_build and c.sha256 not in builds and not screen(c.source)[0]:
            warm_on = config.with_device(devices[len(builds) % len(devices)])
            builds[c.sha256] = pool.submit(timed_prebuild, by_id[c.problem_id], c, warm_on, ext_root)
    return builds
