"""A worker's timed batch, and what it reads around it: the host's pace, and whether the device is idle.

**The batch** (:func:`time_batch`, the worker's ``time`` command). Timed calls, each on inputs generated on
the device for it alone, from its own seed or (the harness's kernels, device_draws.py) from the batch's seed
and the call's number: a cache keyed on addresses or contents never hits. Each call: inputs, L2 flush,
device sync, timed forward, device sync. What the harness adds per call is queued on the device without a
host round trip (fingerprints land in device memory), so the host is free to launch the next call's inputs
while the device works. A call's time is the host's clock between the two device-wide syncs: the device is
idle when the forward starts being launched and has finished everything, side streams included, when the
clock stops, so that interval is the call as a user sees it (CUDA events recorded around it would add their
own record latency to every call).

**The host's pace** (:func:`probe_ms`). On cloud GPU hosts the host CPU's speed changes in spells (a fixed
piece of pure Python work on the timed core took 1.0-1.2 ms in some and 1.6-2.1 ms in others, with no steal
time counted by the kernel), and the eager calls of launch-bound references follow it. The reference's
worker reads it before and after each batch, outside the timed calls; each evaluation records the pace
its reference was timed at (``host_pace_ms``) and each used trial's reading (``trial_pace_ms``), so anyone
can see whether two evaluations, or two trials, were taken at different host speeds. Nothing is decided by
it: the pace did not explain two runs' disagreement, and setting slow trials aside brought runs no closer.

**The idle device** (:class:`IdleDevice`). The candidate's worker drains its device work and stops its
process group before the reference is timed (trials._time_reference), but SIGSTOP stops a process, not its
work on the GPU: a kernel a thread of the candidate queued after the drain runs on, time-sliced with the
reference's batch, and the reference looks slower. The window between the drain and the stop is the
attacker's to widen: a Python thread that holds the GIL when the drain's sync returns keeps the worker's
main thread from its stop for up to the interpreter's switch interval (5 ms) while it launches, and a
thread of a C++ extension needs no GIL. So the reference's worker, which runs trusted code only, asks the
device itself right before its batch: a one-element kernel and a sync come back in microseconds from an
idle GPU, and only at a context switch while another process's kernel holds it (time slices last a
millisecond or more). It probes until two answers in a row are fast, up to a limit, so the batch runs on an
idle device. An honest candidate's device is idle at once (its worker drained it before it stopped); the
parent rejects a candidate whose stopped process kept the device busy over ``BUSY_MS`` in two trials
(trials._check_idle). Each evaluation records the longest wait (``device_wait_ms``).

torch and the standard library only: the GPU evaluation worker imports it. Its functions are harness code
a candidate must not replace, checked by identity after every command (worker._own_code).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from cudal1.evaluator.inputs import CountedInputs
from cudal1.evaluator.probes import Fingerprints, flatten, inspect_outputs

# The current device's synchronize, taken before any candidate code runs (the worker sets its device
# first): torch.cuda.synchronize wraps it in a device guard and a lazy-init check, ~5 us a call, twice a
# timed call. Guarded by identity (worker.GUARDED) like the public function.
device_sync = torch._C._cuda_synchronize if hasattr(torch._C, "_cuda_synchronize") else None


def no_sync() -> None:
    """A CPU device: calls are synchronous."""


# --- the batch ------------------------------------------------------------------------------------------

def time_batch(worker: Any, msg: dict[str, Any]) -> dict[str, Any]:
    """The ``time`` command of ``worker`` (a :class:`cudal1.evaluator.worker.Worker`): warm-up calls, then
    the timed calls of ``msg["seeds"]`` (see the module's docstring); the reply carries each call's time
    (``ms``), its fingerprints, the spot checks' outputs, the host's pace around the batch and, for the
    reference (``idle_device``), the wait for an idle device before it."""
    cuda = worker.device.type == "cuda"
    # The harness kernels' draws where the parent says both programs have them, torch's otherwise
    counted = worker.counted if msg.get("device_draws") else None
    graph = worker.graphed if isinstance(worker.graphed, CountedInputs) == (counted is not None) else None
    eager = counted.inputs if counted is not None else worker._inputs_for
    if counted is not None:
        counted.start(msg["seeds"][0] if msg["seeds"] else 0)  # the batch's key; calls advance its counter
    for seed in msg["warmup_seeds"]:
        worker._forward(graph.draw(seed) if graph is not None else eager(seed))
    assert worker.l2 is not None and worker.model is not None
    # the reference's worker: the candidate's stopped process left no work on the device (IdleDevice)
    settled = worker.idle_device(device_sync).settle() if cuda and msg.get("idle_device") else {}
    worker.l2.heat()
    worker._sync()
    seeds = msg["seeds"]
    prints = Fingerprints(worker.device, msg.get("print_key", 0), calls=len(seeds),
                          kernels=counted.kernels if counted is not None else None)
    counted_graph = graph if counted is not None else None  # graph is then the kernels' (CountedInputs)
    draw = _drawer(worker.l2, graph, eager, counted_graph)
    pace_before = probe_ms()  # the host CPU's pace around the batch, outside the timed calls
    host_ms, call_ms, spots, problems = _timed_calls(worker.model, seeds, set(msg.get("spot", [])), draw, prints,
                                                     worker.device, device_sync if cuda else no_sync,
                                                     deferred=counted_graph is not None)
    if problems:
        return {"ok": True, "ms": host_ms, "problems": problems}
    pace = [pace_before, probe_ms()]
    if graph is not None and not graph.intact():
        worker.graphed = None  # the graph writes where the inputs no longer are: eager from here on
        return {"ok": True, "ms": host_ms, "problems": [
            "an input's storage was replaced or resized during the timed calls (later calls would "
            "have seen stale inputs)"]}
    shipped = worker._ship(spots, msg.get("spot_path")) if spots else {}
    return {"ok": True, "ms": host_ms, "fingerprints": prints.values(), "problems": [],
            "call_ms": call_ms, "pace_ms": pace} | settled | shipped


def _drawer(l2: Any, graph: Any, eager: Callable[[int], list[Any]], counted_graph: CountedInputs | None
            ) -> Callable[..., list[Any]]:
    """A call's inputs and the L2 flush, queued on the device: the kernels' graph (behind the previous
    call's staging copy, which it makes as its first node), else the input graph, else the eager draws."""

    def draw(seed: int, pending: tuple[int, int, int] | None = None) -> list[Any]:
        if counted_graph is not None:
            if l2.touched:
                l2.reset_persisting()  # persisting lines set aside before: reset them before the flush
            made = counted_graph.draw(seed, pending)
            l2.after_replay()
            return made
        if graph is not None:
            l2.reset_persisting()
            return graph.draw(seed)  # the draws, then the L2 flush: one launch
        fresh = eager(seed)
        l2()
        return fresh

    return draw


def _timed_calls(model: Any, seeds: list[int], spot: set[int], draw: Callable[..., list[Any]], prints: Fingerprints,
                 device: torch.device, sync: Callable[[], None], deferred: bool
                 ) -> tuple[list[float], list[float], dict[str, Any], list[str]]:
    """The timed calls: each call's ms, each iteration's ms with the harness's work around it (not the last,
    which draws no next inputs; timing.calls_per_trial reads them), the spot-checked outputs, and the
    problems that ended the batch early (none for a whole batch)."""
    clock = time.perf_counter
    host_ms: list[float] = []
    call_ms: list[float] = []
    spots: dict[str, Any] = {}
    with torch.no_grad():  # entered once: per call it would be harness time inside the timed region
        upcoming = draw(seeds[0]) if seeds else []
        call_t0 = clock()
        for i, seed in enumerate(seeds):
            inputs, upcoming = upcoming, []
            sync()  # device idle: no harness work or earlier call overlaps the timed region
            t0 = clock()
            out = model(*inputs)
            sync()  # device-wide: work a candidate left on side streams counts
            t1 = clock()
            host_ms.append((t1 - t0) * 1e3)
            _, outputs = flatten(out)
            # Every call, before anything touches the output: a plain tensor, or a lazy object whose
            # work would run inside the fingerprint, after the clock stopped.
            fake = [type(o).__name__ for o in outputs if isinstance(o, torch.Tensor) and type(o) is not torch.Tensor]
            if fake:
                return host_ms, call_ms, spots, [f"timed call {i + 1} returned a {fake[0]}, not a plain torch.Tensor"]
            # the outputs' copies, queued before the next call's inputs and flush (or made by its graph)
            staged, pending = prints.queue(outputs, defer=deferred and i + 1 < len(seeds), seed=seed)
            if i in spot:
                problems = inspect_outputs(outputs, inputs, device)
                if problems:
                    return host_ms, call_ms, spots, problems
                spots[str(i)] = [o.detach().clone() if isinstance(o, torch.Tensor) else o for o in outputs]
            del inputs
            if i + 1 < len(seeds):
                # The next call's inputs and flush are queued now, and the host's bookkeeping below
                # runs while the device flushes L2 instead of before it.
                upcoming = draw(seeds[i + 1], pending)
            del out, outputs  # after the replay that copies them, where it does
            prints.record(staged, seed)
            if i + 1 < len(seeds):
                now = clock()
                call_ms.append((now - call_t0) * 1e3)
                call_t0 = now
    return host_ms, call_ms, spots, []


# --- the host's pace ------------------------------------------------------------------------------------

def probe_ms(n: int = 3000) -> float:
    """Milliseconds a fixed piece of pure Python work takes on this core now (~0.15 ms at a fast pace):
    the host CPU's own speed, no device work in it."""
    t0 = time.perf_counter()
    total = 0
    for i in range(n):
        total += i * i
    return (time.perf_counter() - t0) * 1e3


def evaluation_pace(paces: list[float]) -> float | None:
    """The pace an evaluation's reference was timed at: the median of its batches' readings (each the
    slower of the readings before and after the batch), None where none was read.

    >>> evaluation_pace([0.1, 0.3, 0.12]), evaluation_pace([0.0]) is None
    (0.12, True)
    """
    read = [p for p in paces if p > 0]
    return statistics.median(read) if read else None


# --- the idle device ------------------------------------------------------------------------------------

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
# for milliseconds at times (a median 0.15 ms and at most 8.3 ms over a whole release, where a 1 ms limit
# rejected honest programs). What the candidate queued before its stop reaches the batch only if it
# outlasts the wait (LIMIT_S): the wait runs it out, and a stopped process launches nothing more. So the
# limit is for work that holds the device on and on: 50 ms is 25 time slices and 6x the longest honest wait.
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
