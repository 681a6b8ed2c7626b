"""Whether the GPU is idle before the reference's timed batch, and the wait until it is.

The candidate's worker drains its device work and stops its process group before the reference is timed
(trials._time_reference), but SIGSTOP stops a process, not its work on the GPU: a kernel a thread of the
candidate queued after the drain runs on, time-sliced with the reference's batch, and the reference looks
slower. The window between the drain and the stop is the attacker's to widen: a Python thread that holds
the GIL when the drain's sync returns keeps the worker's main thread from its stop for up to the
interpreter's switch interval (5 ms) while it launches, and a thread of a C++ extension needs no GIL.

So the reference's worker, which runs trusted code only, asks the device itself right before its batch:
a one-element kernel and a sync come back in microseconds from an idle GPU, and only at a context switch
while another process's kernel holds it (time slices last a millisecond or more). It probes until two
answers in a row are fast, up to a limit, so the batch runs on an idle device. An honest candidate's
device is idle at once (its worker drained it before it stopped); the parent rejects a candidate whose
stopped process kept the device busy over ``BUSY_MS`` in two trials (trials._check_idle), as it rejects
one whose process kept working on the CPU. A shorter wait may as well be the evaluator's own other
workers on the device, and it is harmless either way: the batch starts once it is over. Each evaluation
records the longest wait (``device_wait_ms``).

torch and the standard library only: the GPU evaluation worker imports it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import torch

# No idle answer is slower: a launch and a sync take 10-30 us on an H100 host; a time slice is longer.
FLOOR_US = 250.0
# Nor slower than this many times the fastest answer the worker has had (a slow host's own floor), up to
# CAP_US: a device kept busy from the worker's first probe on must not raise its own threshold
BASE_FACTOR = 8.0
CAP_US = 1000.0
# How long the reference waits at most for the device to answer fast
LIMIT_S = 0.5
# A wait longer than this, in two trials, rejects the candidate. Not the time two fast answers take (well
# under 0.1 ms): the evaluator's own other workers on the device (starting, loading ahead, exiting) hold it
# for milliseconds at times. On the whole H200 release the reference waited a median 0.15 ms and at most
# 8.3 ms, and a 1 ms limit rejected five honest programs over two runs, other rows each time
# (docs/gpu-runs.md#2026-11-28-idle-device). What the candidate queued before its stop reaches the batch
# only if it outlasts the wait (LIMIT_S): the wait runs it out, and a stopped process launches nothing
# more. So the limit is for work that holds the device on and on: 50 ms is 25 time slices and 6x the
# longest honest wait.
BUSY_MS = 50.0


def settle(probe: Callable[[], float], threshold_us: Callable[[], float], limit_s: float = LIMIT_S,
           clock: Callable[[], float] = time.perf_counter) -> dict[str, Any]:
    """Probe until two answers in a row are within the threshold, or ``limit_s`` has passed: the wait (ms,
    the two fast probes included), whether the device was still busy at the limit, and how many probes
    it took (two where it was idle at once).

    >>> answers = iter([900.0, 1200.0, 20.0, 15.0])
    >>> ticks = iter(range(10))
    >>> settle(lambda: next(answers), lambda: 250.0, 5.0, clock=lambda: next(ticks) / 1000)
    {'device_wait_ms': 4.0, 'device_busy': False, 'device_probes': 4}
    >>> ticks = iter(range(10))
    >>> settle(lambda: 900.0, lambda: 250.0, 0.0035, clock=lambda: next(ticks) / 1000)["device_busy"]
    True
    """
    start = clock()
    fast = probes = 0
    busy = False
    while fast < 2:
        probes += 1
        fast = fast + 1 if probe() <= threshold_us() else 0
        if fast < 2 and clock() - start > limit_s:
            busy = True
            break
    return {"device_wait_ms": round((clock() - start) * 1e3, 3), "device_busy": busy, "device_probes": probes}


class IdleDevice:
    """The probe of one worker's device: a one-element tensor of its own, the device-wide sync it is
    given, and the fastest answer seen so far (the floor its threshold scales from)."""

    def __init__(self, device: torch.device, sync: Callable[[], None]) -> None:
        self.tensor = torch.zeros(1, device=device)
        self.sync = sync
        self.fastest_us = math.inf
        self.probe_us()  # the kernel's first launch loads it: not an answer

    def probe_us(self) -> float:
        t0 = time.perf_counter()
        self.tensor.add_(1.0)
        self.sync()
        us = (time.perf_counter() - t0) * 1e6
        self.fastest_us = min(self.fastest_us, us)
        return us

    def threshold_us(self) -> float:
        return min(max(FLOOR_US, BASE_FACTOR * self.fastest_us), CAP_US)

    def settle(self, limit_s: float = LIMIT_S) -> dict[str, Any]:
        return settle(self.probe_us, self.threshold_us, limit_s)
