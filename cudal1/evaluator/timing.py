"""Statistics over raw per-call times, computed in the parent (the candidate never sees or shapes them), and
what sets a trial aside: how long a timed worker waited for its core while another process held it.

**Contended trials.** On a shared CPU another process on the timed worker's core takes time slices in the
middle of its calls: on the 2-core CI machine, with three test workers, the reference evaluated against
itself read 0.38x over three consistent trials, each call stretched by a slice given to someone else
(docs/evaluator.md at 88f971b, "Contended trials"). The parent reads ``/proc/<pid>/task/<tid>/schedstat`` (CPU time
and run-queue wait in nanoseconds, kept by the kernel: the worker cannot shape them) around each timed
batch (:func:`sample`). Only waiting caused by *other* processes counts: the CPU time the worker's own other
threads used in the batch is subtracted from its main thread's wait. Its threads share the main thread's
core (a worker is pinned, and a candidate may not change its affinity), so a candidate that keeps a thread
busy to make its slow trials look contended, and have them measured again, gains nothing.
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cudal1.candidates import Evaluation
from cudal1.evaluator.config import EvalConfig
from cudal1.evaluator.timed import BUSY_MS

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


@dataclass(frozen=True)
class TrialPair:
    """One paired trial: per-call times of both programs (ms) and the parent's wall clock per batch (s)."""

    reference_ms: list[float]
    candidate_ms: list[float]
    reference_wall_s: float
    candidate_wall_s: float
    # Seconds each timed thread waited for its core while another process held it (sample, external_wait_s)
    reference_wait_s: float = 0.0
    candidate_wait_s: float = 0.0
    # The host CPU's pace around the reference's batch (timed.probe_ms: ms of a fixed probe; 0 where not read)
    pace_ms: float = 0.0
    # CPU seconds the candidate's process used while it was idle (over the reference's warm-up, and its
    # threads but the main one over its drain and stop), and that window's wall clock (s)
    candidate_idle_cpu_s: float = 0.0
    idle_window_s: float = 0.0
    # How long the reference's worker waited, right before its batch, for the device to answer fast with
    # the candidate stopped (timed.IdleDevice; 0 where it did not probe)
    device_wait_ms: float = 0.0
    # Calls per trial as this trial's own batches set them (calls_per_trial over many calls a side)
    calls_per_trial: int = 0

    @property
    def candidate_worked(self) -> bool:
        """The candidate's process spent over IDLE_WORK_SHARE of the window, and over IDLE_WORK_MIN_S, on
        the CPU while it was idle (sample, external_wait_s).

        >>> TrialPair([1.0], [1.0], 0.020, 0.020, candidate_idle_cpu_s=0.009, idle_window_s=0.03).candidate_worked
        True
        >>> TrialPair([1.0], [1.0], 0.020, 0.020, candidate_idle_cpu_s=0.0001, idle_window_s=0.0003).candidate_worked
        False
        """
        return self.candidate_idle_cpu_s > max(IDLE_WORK_SHARE * self.idle_window_s, IDLE_WORK_MIN_S)

    @property
    def device_kept_busy(self) -> bool:
        """Another process's work held the device after the candidate drained it and stopped.

        >>> TrialPair([1.0], [1.0], 0.02, 0.02, device_wait_ms=0.04).device_kept_busy
        False
        >>> TrialPair([1.0], [1.0], 0.02, 0.02, device_wait_ms=8.3).device_kept_busy  # a neighbour's load
        False
        >>> TrialPair([1.0], [1.0], 0.02, 0.02, device_wait_ms=120.0).device_kept_busy
        True
        """
        return self.device_wait_ms > BUSY_MS

    @property
    def wait_share(self) -> float:
        """The larger of the two programs' waits for a core, as a share of its batch's wall clock."""
        return max(self.reference_wait_s / max(self.reference_wall_s, 1e-9),
                   self.candidate_wait_s / max(self.candidate_wall_s, 1e-9))

    @property
    def contended(self) -> bool:
        """Either program waited for its core more than CONTENDED_SHARE of its batch.

        >>> TrialPair([1.0], [1.0], 0.020, 0.020, 0.001, 0.0).contended, TrialPair([1.0], [1.0], 0.020, 0.020, 0.0, 0.008).contended
        (False, True)
        """
        return self.wait_share > CONTENDED_SHARE

    @property
    def speedup(self) -> float:
        return statistics.median(self.reference_ms) / max(statistics.median(self.candidate_ms), 1e-9)


@dataclass(frozen=True)
class Measurement:
    speedup: float
    reference_ms: float
    candidate_ms: float
    spread: float
    trials: int
    low: float = 0.0  # the median speedup's confidence interval (see median_interval)
    high: float = math.inf

    @classmethod
    def from_pairs(cls, pairs: list[TrialPair]) -> Measurement:
        speedups = [p.speedup for p in pairs]
        low, high = median_interval(speedups)
        return cls(
            speedup=statistics.median(speedups),
            reference_ms=statistics.median(statistics.median(p.reference_ms) for p in pairs),
            candidate_ms=statistics.median(statistics.median(p.candidate_ms) for p in pairs),
            spread=relative_spread(speedups),
            trials=len(pairs),
            low=low,
            high=high,
        )

    @property
    def half_width(self) -> float:
        """The interval's larger distance from the median, relative to it (0.01: within 1%)."""
        if self.speedup <= 0:
            return math.inf
        return max(self.high / self.speedup - 1.0, 1.0 - self.low / self.speedup)


def median_interval(values: list[float], confidence: float = 0.95) -> tuple[float, float]:
    """A distribution-free confidence interval of the median: order statistics x(k) and x(n+1-k), k the
    largest rank whose binomial coverage still reaches ``confidence``. No assumption on the shape of the
    per-trial speedups (a preempted trial makes them skewed). Below six values no pair of ranks reaches
    95%: the whole range is returned (its coverage, 1 - 2/2^n, is then lower than asked).

    >>> median_interval([1.0, 1.1, 0.9, 1.05, 0.95, 1.02])  # n=6: min and max cover 96.9%
    (0.9, 1.1)
    >>> median_interval([float(v) for v in range(1, 13)])  # n=12: ranks 3 and 10 cover 96.1%
    (3.0, 10.0)
    >>> median_interval([2.0, 3.0])
    (2.0, 3.0)
    """
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        return (0.0, math.inf)
    k = 1
    while k < n // 2 and _coverage(n, k + 1) >= confidence:
        k += 1
    return (ordered[k - 1], ordered[n - k])


def _coverage(n: int, k: int) -> float:
    """P(x(k) <= median <= x(n+1-k)) for n independent draws: 1 - 2 P(Binomial(n, 1/2) < k)."""
    tail = sum(math.comb(n, i) for i in range(k)) / 2**n
    return 1.0 - 2.0 * tail


def relative_spread(values: list[float]) -> float:
    """(max - min) / median after dropping the single highest and lowest value when there are 5 or more:
    one preempted trial should not force a re-measurement, a consistently noisy result should.

    >>> relative_spread([1.0, 1.0, 1.1, 0.9, 5.0])  # 5.0 and 0.9 dropped
    0.1
    >>> relative_spread([2.0, 2.0])
    0.0
    """
    ordered = sorted(values)
    if len(ordered) >= 5:
        ordered = ordered[1:-1]
    mid = statistics.median(values)
    return round((ordered[-1] - ordered[0]) / mid, 12) if mid > 0 else float("inf")


def wallclock_discrepancy(pairs: list[TrialPair]) -> tuple[float, float]:
    """(claimed saving, observed saving) in ms over all trials. The claimed saving comes from the
    workers' own clocks; the observed one from the parent's clock around each batch, which also holds
    input generation and warm-up, the same work for both programs. A candidate that fakes its clock
    claims far more saving than the parent saw."""
    claimed = sum(sum(p.reference_ms) - sum(p.candidate_ms) for p in pairs)
    observed = sum((p.reference_wall_s - p.candidate_wall_s) * 1e3 for p in pairs)
    return claimed, observed


def forged_timing(pairs: list[TrialPair], slack: float) -> str:
    """A reason when the workers' clocks claim a saving the parent's clock did not see: the per-trial
    excess (claimed - observed) must be large (over ``slack`` of the reference's timed work plus 5 ms),
    consistent (over four standard errors) and beyond the noise of the work around the timed calls
    (twice the range of the reference's own untimed time, which the candidate cannot shape), so
    scheduling noise on a busy machine does not trip it; only a claim to be faster is examined, since
    forging is only ever done in that direction.

    >>> busy = [TrialPair([1.0] * 3, [0.5] * 3, w, w + 0.015) for w in (0.055, 0.085, 0.060)]
    >>> forged_timing(busy, slack=0.5)  # 16.5 ms of excess a trial, inside the untimed time's 30 ms range
    ''
    >>> forged = [TrialPair([10.0] * 3, [1.0] * 3, w, w) for w in (0.055, 0.058, 0.056)]
    >>> forged_timing(forged, slack=0.5)[:25]
    'timing does not add up: t'
    """
    claimed, observed = wallclock_discrepancy(pairs)
    if claimed <= 0 or len(pairs) < 2:
        return ""
    excess = [(sum(p.reference_ms) - sum(p.candidate_ms)) - (p.reference_wall_s - p.candidate_wall_s) * 1e3
              for p in pairs]
    mean = statistics.fmean(excess)
    stderr = statistics.stdev(excess) / len(excess) ** 0.5
    reference_per_trial = statistics.fmean(sum(p.reference_ms) for p in pairs)
    untimed = [p.reference_wall_s * 1e3 - sum(p.reference_ms) for p in pairs]
    if mean > max(slack * reference_per_trial, 4 * stderr, 2 * (max(untimed) - min(untimed))) + 5.0:
        return (f"timing does not add up: the candidate's clock claims {claimed:.1f} ms saved over "
                f"{len(pairs)} trials, the harness's wall clock saw {observed:.1f} ms")
    return ""


def calls_per_trial(cfg: EvalConfig, replies: Sequence[dict[str, Any]]) -> int:
    """Calls per trial from short timed batches' replies (``ms`` and ``call_ms`` per call). A call's cost
    is the whole iteration (inputs, L2 flush, timed forward, fingerprint), not the timed forward alone:
    where the harness's work outweighs a small kernel (large inputs on a CPU: 7 ms of work around a
    0.26 ms forward), a trial still lasts about target_trial_ms. The fastest of the calls, as for the
    forward: a worker's first timed call also pays first-use costs. A reply's ``call_ms`` comes from the
    candidate's own process: what is not a finite number there is left out."""
    per_call = [min((float(c) for c in r.get("call_ms") or [] if isinstance(c, (int, float)) and math.isfinite(c)),
                    default=0.0) for r in replies]
    slowest = max(*(min(r["ms"]) for r in replies), *per_call, 1e-3)
    return int(min(cfg.max_iters, max(cfg.min_iters, cfg.target_trial_ms // slowest)))


def trace_row(ref: dict[str, Any], cand: dict[str, Any], ref_wall: float, cand_wall: float,
               reference_first: bool, trial_s: float) -> dict[str, Any]:
    """One trial as the noise diagnosis needs it: the median call per program, the parent's wall per batch
    and for the whole trial (warm-ups and messages included)."""
    def med(xs: list[float]) -> float:
        return round(statistics.median(xs), 5) if xs else float("nan")

    return {"ratio": round(med(ref["ms"]) / max(med(cand["ms"]), 1e-9), 5), "ref_first": reference_first,
            "ref_ms": med(ref["ms"]), "cand_ms": med(cand["ms"]), "ref_wall_s": round(ref_wall, 4),
            "cand_wall_s": round(cand_wall, 4), "trial_s": round(trial_s, 4)}


def interval_of(e: Evaluation) -> tuple[float, float, float]:
    """(speedup, low, high); an evaluation without an interval counts as a single figure."""
    s = e.speedup or 0.0
    return (s, e.speedup_low if e.speedup_low is not None else s, e.speedup_high if e.speedup_high is not None else s)


def agrees_with_any(now: tuple[float, float, float], earlier: Sequence[tuple[float, float, float]],
                    limit: float) -> bool:
    """Whether a measurement in progress (speedup, low, high) agrees with one of ``earlier`` (the rule of
    :func:`agreeing_pair`; pairs among ``earlier`` themselves are not asked).

    >>> agrees_with_any((9.14, 8.8, 9.5), [(21.8, 21.0, 22.5), (8.19, 7.9, 8.5)], 0.05)
    True
    >>> agrees_with_any((0.98, 0.95, 1.01), [(21.8, 21.0, 22.5), (2.99, 2.9, 3.1)], 0.05)
    False
    >>> agrees_with_any((2.99, 2.9, 3.1), [], 0.05)
    False
    """
    return any(agreeing_pair([before, now], limit) for before in earlier)


def agreeing_pair(measured: list[tuple[float, float, float]], limit: float) -> bool:
    """Whether two measurements (speedup, low, high) agree: the faster one's interval starts no more than
    ``limit`` above the end of the slower one's. Without intervals this is CUDA-L1's rule (within
    ``limit`` of each other, relative to the smaller).

    >>> agreeing_pair([(25.4, 25.4, 25.4), (39.9, 39.9, 39.9)], 0.1)  # single figures, 57% apart
    False
    >>> agreeing_pair([(8.19, 7.9, 8.5), (9.14, 8.8, 9.5)], 0.05)  # 12% apart, intervals 3.5% apart
    True
    >>> agreeing_pair([(21.8, 21.0, 22.5), (0.98, 0.95, 1.01), (2.99, 2.9, 3.1)], 0.05)  # fast only once
    False
    """
    for i, a in enumerate(measured):
        for b in measured[i + 1:]:
            slow, fast = sorted((a, b))
            if fast[1] <= slow[2] * (1 + limit):
                return True
    return False
