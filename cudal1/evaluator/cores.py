"""Which CPU cores a worker runs on, on a GPU's host: each device's timed workers (its reference and its
candidates) on one core of their own, in the upper half of the cores this process may use; the starts of
workers and the builds on the lower half, where no device times. Standard library only: the GPU
evaluation worker (worker_main) and the parent both use it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager


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
    on that one core, while timing waited for the loads."""
    if cores is None or not hasattr(os, "sched_getaffinity"):
        yield
        return
    before = os.sched_getaffinity(0)
    set_affinity(cores)
    try:
        yield
    finally:
        set_affinity(before)
