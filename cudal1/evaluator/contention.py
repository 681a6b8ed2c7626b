"""How long a timed worker waited for its core while it was timed, from the kernel's accounting.

On a shared CPU another process on the timed worker's core takes time slices in the middle of its calls:
on the 2-core CI machine, with three test workers, the reference evaluated against itself read 0.38x
over three consistent trials, each call stretched by a slice given to someone else (docs/evaluator.md,
"Contended trials"). The parent reads ``/proc/<pid>/task/<tid>/schedstat`` (CPU time and run-queue wait
in nanoseconds, kept by the kernel: the worker cannot shape them) around each timed batch.

Only waiting caused by *other* processes counts: the CPU time the worker's own other threads used in the
batch is subtracted from its main thread's wait. Its threads share the main thread's core (a worker is
pinned, and a candidate may not change its affinity), so a candidate that keeps a thread busy to make
its slow trials look contended, and have them measured again, gains nothing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

# A batch in which the timed thread waited more than this share of its wall clock for a core held by
# another process is set aside and timed again. A per-call median shrugs off one preempted call, not
# the slices of a process that shares the core for the whole batch.
CONTENDED_SHARE = 0.10
# The candidate's process is idle while the reference is warmed up and timed: its worker waits for the
# next command. A share of that window this large, spent on the CPU by any of the candidate's threads, in
# IDLE_WORK_TRIALS trials of an evaluation, is a thread it left running to slow the reference on the core
# both share, and the candidate is rejected (trials.py).
IDLE_WORK_SHARE = 0.25
IDLE_WORK_TRIALS = 2
# ... and at least this much (s): the worker's own return to its command pipe after a reply can land in a
# window of a fraction of a millisecond (0.07 ms once on the CPU machine, the reference's warm-up a few)
IDLE_WORK_MIN_S = 0.0005


@dataclass(frozen=True)
class ThreadTimes:
    """CPU time and run-queue wait (ns) of a worker's threads at one moment, by thread id."""

    main: int
    threads: dict[int, tuple[int, int]]


def sample(pid: int) -> ThreadTimes | None:
    """The worker's threads' times now; None where /proc does not tell (another OS, a hidden pid, a
    process that has exited)."""
    threads: dict[int, tuple[int, int]] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as f:
                cpu, wait = f.read().split()[:2]
        except (OSError, ValueError):
            continue  # a thread that ended between the listing and the read
        threads[int(tid)] = (int(cpu), int(wait))
    return ThreadTimes(pid, threads) if pid in threads else None


def external_wait_s(before: ThreadTimes | None, after: ThreadTimes | None) -> float:
    """Seconds the main thread waited for its core between two samples, less the CPU time the process's
    other threads used meanwhile (threads started in between count from zero). 0.0 when unknown.

    >>> a = ThreadTimes(1, {1: (0, 0), 2: (0, 0)})
    >>> external_wait_s(a, ThreadTimes(1, {1: (5_000_000, 3_000_000), 2: (1_000_000, 0)}))
    0.002
    >>> external_wait_s(a, ThreadTimes(1, {1: (5_000_000, 3_000_000), 3: (4_000_000, 0)}))  # own thread
    0.0
    """
    if before is None or after is None or before.main != after.main:
        return 0.0
    main_wait = after.threads[after.main][1] - before.threads[before.main][1]
    own = sum(cpu - before.threads.get(tid, (0, 0))[0]
              for tid, (cpu, _) in after.threads.items() if tid != after.main)
    return max(0.0, (main_wait - max(own, 0)) / 1e9)


def process_cpu_s(before: ThreadTimes | None, after: ThreadTimes | None) -> float:
    """Seconds of CPU every thread of a process used between two samples (threads started in between
    count from zero; one that ended in between is missed). 0.0 when unknown.

    >>> a = ThreadTimes(1, {1: (0, 0), 2: (1_000_000, 0)})
    >>> process_cpu_s(a, ThreadTimes(1, {1: (500_000, 9), 2: (3_000_000, 0), 3: (2_000_000, 0)}))
    0.0045
    """
    if before is None or after is None or before.main != after.main:
        return 0.0
    used = sum(cpu - before.threads.get(tid, (0, 0))[0] for tid, (cpu, _) in after.threads.items())
    return max(0, used) / 1e9


def other_threads_cpu_s(before: ThreadTimes | None, after: ThreadTimes | None) -> float:
    """Seconds of CPU the threads other than the main one used between two samples: while the worker's
    main thread answers a command, what the program's own threads did beside it. 0.0 when unknown.

    >>> a = ThreadTimes(1, {1: (0, 0), 2: (1_000_000, 0)})
    >>> other_threads_cpu_s(a, ThreadTimes(1, {1: (9_000_000, 0), 2: (3_000_000, 0), 3: (500_000, 0)}))
    0.0025
    """
    if before is None or after is None or before.main != after.main:
        return 0.0
    used = sum(cpu - before.threads.get(tid, (0, 0))[0] for tid, (cpu, _) in after.threads.items() if tid != after.main)
    return max(0, used) / 1e9
