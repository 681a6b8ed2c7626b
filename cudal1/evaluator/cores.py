"""Which CPU cores a worker runs on, on a GPU's host: each device's timed workers (its reference and its
candidates) on one core of their own, in the upper half of the cores this process may use; the starts of
workers and the builds on the lower half, where no device times. Standard library only: the GPU
evaluation worker (worker_main) and the parent both use it."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from cudal1.evaluator.pace import FAST_SLACK


def timed_core(device: str, core: int | None = None) -> int | None:
    """The core a timed worker runs on, or None to leave it to the scheduler. A GPU's timed workers get one
    core of their own: the launch of a small kernel is host work, and a process that migrates between
    cores, or lands beside a busy one, times the same program differently from one trial to the next.
    Both programs of a pair share that core (they are never timed at once), so neither is favoured. On a
    CPU device the parent names the core (one per problem): a load that sits on one core for seconds then
    slows both programs of the pair alike instead of one of them."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    if not device.startswith("cuda"):
        return core if core is not None and core in os.sched_getaffinity(0) else None
    if os.environ.get("CUDA_VISIBLE_DEVICES") == "" or os.nice(0) > 0:
        return None  # a build worker (no GPU, or low priority): its cores are the spare ones
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 4:
        return None  # too few cores to give one away
    index = int(device.split(":")[1]) if ":" in device else 0
    return allowed[-1 - index % (len(allowed) // 2)]


def spare_cores() -> set[int] | None:
    """The cores no device times on (the lower half of those allowed; :func:`timed_core` takes from the
    upper half), or None where there are too few to split."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    allowed = sorted(os.sched_getaffinity(0))
    return set(allowed[:len(allowed) - len(allowed) // 2]) if len(allowed) >= 4 else None


def set_affinity(cores: int | set[int] | None) -> None:
    """This thread's cores (threads started later inherit them); None leaves them as they are."""
    if cores is None or not hasattr(os, "sched_setaffinity"):
        return
    try:
        os.sched_setaffinity(0, {cores} if isinstance(cores, int) else cores)
    except OSError:
        pass


@contextmanager
def on_cores(cores: set[int] | None) -> Iterator[None]:
    """This thread on ``cores`` for the block, back on the cores it had after it (also when the block
    raises); a no-op for None. A GPU worker's load prepares the reference's inputs (the plan, the
    harness's draws, the input graph) on its spare cores before any program code runs: on its device's
    timed core that preparation queued behind the other loads ahead and the timed candidate's checks, all
    on that one core, while timing waited for the loads (EvalConfig.spare_prep)."""
    if cores is None or not hasattr(os, "sched_getaffinity"):
        yield
        return
    before = os.sched_getaffinity(0)
    set_affinity(cores)
    try:
        yield
    finally:
        set_affinity(before)


def hop_cores(device: str, devices: int) -> list[int]:
    """The cores a device's timed workers may move between before each timed call (EvalConfig.fast_core):
    its timed core first, then every ``devices``-th core of the upper half, so no two devices share one;
    [] where :func:`timed_core` gives none."""
    if not device.startswith("cuda") or timed_core(device) is None:
        return []
    allowed = sorted(os.sched_getaffinity(0))
    index, every = (int(device.split(":")[1]) if ":" in device else 0), max(devices, 1)
    return [allowed[-1 - k] for k in range(len(allowed) // 2) if k % every == index % every]


class CoreHop:
    """Before each timed call, the timed worker reads the host's pace on its core and, where that core is
    in its slow level, moves to the next of its ``cores`` and reads again, at most ``hops`` times
    (EvalConfig.fast_core). The host's cores switch between two levels about 1.6x apart each on its own, in
    spells of tens of milliseconds, so among four cores one is fast 91-96% of the time
    (docs/gpu-runs.md#2026-11-29-call-pace-release). Every call is timed and counted wherever it runs; only
    where it runs is chosen, and the same way for both programs of a pair, so a program that slowed its own
    readings would only stay on a slow core. The fast level is FAST_SLACK over the fastest reading this
    worker has had; every core is read once before each batch (:meth:`start`). A move has its own cost: on
    an H200 host the move took 53-67 µs, the call right after it ran 1.18-1.60x slower and the probe right
    after it read slow 99% of the time (``settle`` discards that reading; benchmarks/move_cost.py,
    docs/gpu-runs.md#2026-11-29-move-cost)."""

    def __init__(self, cores: list[int], probe: Callable[[], float], move: Callable[[int], None] = set_affinity,
                 settle: bool = False) -> None:
        self.cores, self.probe, self.move = cores, probe, move
        self.settle = settle  # a discarded probe after each move: the first one on a new core reads its cold caches
        self.at = 0
        self.floor: float | None = None
        self.hops = 0  # moves made over the worker's life

    def start(self) -> None:
        """Before a batch's first call, outside the iterations that set its calls per trial: every core read
        once, the fastest reading lowering the level's floor, and the batch started on that core."""
        readings = []
        for i, core in enumerate(self.cores):
            self.move(core)
            readings.append((self.probe(), i))
        fastest, self.at = min(readings)
        self.floor = fastest if self.floor is None else min(self.floor, fastest)
        self.move(self.cores[self.at])
        self.hops += len(self.cores)

    def before_call(self, hops: int) -> float:
        """Onto a core at the fast level if one is found within ``hops`` moves; the last reading (ms)."""
        if self.floor is None:
            self.start()
        assert self.floor is not None
        reading = self.probe()
        for _ in range(min(hops, len(self.cores) - 1)):
            if reading <= FAST_SLACK * self.floor:
                break
            self.at = (self.at + 1) % len(self.cores)
            self.move(self.cores[self.at])
            self.hops += 1
            if self.settle:
                self.probe()
            reading = self.probe()
        self.floor = min(self.floor, reading)
        return reading

    def home(self) -> None:
        """Back on the timed core, where the worker's other work runs."""
        if self.at:
            self.at = 0
            self.move(self.cores[0])
