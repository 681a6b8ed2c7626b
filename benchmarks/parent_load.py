"""How loaded the evaluating parent process was during a run, and where each device's timed core sits.

The parent (one process) drives every device from threads of its own (cudal1.evaluator.batch: a loop per
device, its workers' starters and loaders, the correctness records), so its threads share one interpreter
lock. On the whole release on two H200s the rows' own time summed 1.20x one GPU's on the same host, most of
it in the phases the parent drives (first calls, correctness; docs/gpu-runs.md#2026-11-28-two-gpu-whole).
Two measurements tell whether the parent is where that goes:

- the parent's own CPU time (user + system, its children not included) against the wall;
- which of its threads that CPU went to, read from /proc about once a second (a thread that ended between
  two readings loses its last second), grouped by the thread's name;
- a probe thread that sleeps 5 ms at a time and records how late it wakes: a thread that wants the
  interpreter lock waits up to the switch interval (5 ms) for it while another thread holds it, so the
  lateness is the wait any of the parent's threads meets for the lock (on an idle interpreter ~0.1 ms).

And the host around it, read at the same ticks: how many of its cores were busy (from /proc/stat, any
process's work), the share of time the hypervisor took from them (steal), and the clock /proc/cpuinfo
reports, over all cores and on the cores named in ``watch`` (the timed cores). On that same pair the host's
own pace on a timed core (pace.py: a fixed piece of Python work) was 11-19% slower with both GPUs busy,
with one evaluating process or one per GPU (#2026-11-28-split): these readings tell whether more busy
cores, a lower clock or the hypervisor goes with it.

And the host's topology for the timed cores (cores.timed_core): two devices whose timed cores are
hyperthreads of one physical core share it. Standard library and the core only (runs on the GPU machine).
The probe is itself a thread of the parent: on a CPU run of three release rows it used 0.13 s of CPU in
21.7 s, its wake-ups each holding the lock for a few microseconds.
"""

from __future__ import annotations

import os
import re
import statistics
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cudal1.evaluator.contention import sample
from cudal1.evaluator.cores import timed_core
from cudal1.evaluator.procfs import processes
from cudal1.reports import percentile

PROBE_SLEEP_S = 0.005
THREADS_EVERY = 200  # the probe's wake-ups between two readings of the threads' CPU (about a second)
# The project's own frames, the ones a stack sample is told by (stacks=True)
OWN = (os.sep + "cudal1" + os.sep, os.sep + "benchmarks" + os.sep)


def stack_key(frame: Any, depth: int = 3) -> tuple[str, str]:
    """Where a sampled thread is: its innermost frame (``file:function``), and the chain of its ``depth``
    innermost frames of the project's own code, innermost last (``a > b > c``). A thread waiting for a
    worker's reply is in ``process.py:_read_reply``; one reading /proc in ``procfs.py:process_info``."""
    leaf = f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_code.co_name}"
    chain: list[str] = []
    while frame is not None and len(chain) < depth:
        name = frame.f_code.co_filename
        if any(part in name for part in OWN):
            chain.append(f"{os.path.basename(name)}:{frame.f_code.co_name}")
        frame = frame.f_back
    return leaf, " > ".join(reversed(chain))


def cpu_jiffies() -> dict[int, tuple[int, int, int]]:
    """Each core's (busy, total, steal) clock ticks since boot, from /proc/stat; empty where it cannot be read.
    Busy is user, nice, system, irq and softirq; total adds idle, iowait and steal."""
    out: dict[int, tuple[int, int, int]] = {}
    try:
        lines = Path("/proc/stat").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        name, *fields = line.split()
        if name.startswith("cpu") and name[3:].isdigit() and len(fields) >= 8:
            user, nice, system, idle, iowait, irq, softirq, steal = (int(f) for f in fields[:8])
            busy = user + nice + system + irq + softirq
            out[int(name[3:])] = (busy, busy + idle + iowait + steal, steal)
    return out


def cpu_mhz() -> dict[int, float]:
    """Each core's clock as /proc/cpuinfo reports it now (a virtual machine may report a fixed figure)."""
    out: dict[int, float] = {}
    core = None
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        key, _, value = line.partition(":")
        if key.strip() == "processor":
            core = int(value)
        elif key.strip() == "cpu MHz" and core is not None:
            out[core] = float(value)
    return out


def host_summary(samples: list[tuple[dict[int, tuple[int, int, int]], dict[int, float]]],
                 watch: Sequence[int] = ()) -> dict[str, Any]:
    """busy_cores (mean and p90 over the intervals between readings: the sum of each core's busy share),
    steal_share (of all cores' time), mhz_median (the cores' mean clock, median over readings) and, for each
    watched core, its busy share and median clock.

    >>> a = ({0: (0, 100, 0), 1: (0, 100, 0)}, {0: 2000.0, 1: 3000.0})
    >>> b = ({0: (100, 200, 0), 1: (50, 200, 10)}, {0: 2000.0, 1: 2000.0})
    >>> host_summary([a, b], watch=[1])
    {'busy_cores': {'mean': 1.5, 'p90': 1.5}, 'steal_share': 0.05, 'mhz_median': 2250.0, 'watched': {1: {'busy_share': 0.5, 'mhz_median': 2500.0}}}
    """
    if len(samples) < 2:
        return {}
    busy, steal, total = [], 0, 0
    for (before, _), (after, _) in zip(samples, samples[1:]):
        # each core's (busy, total, steal) ticks over the interval
        deltas = [[a - b for a, b in zip(after[c], before[c])] for c in after if c in before]
        busy.append(sum(d[0] / max(d[1], 1) for d in deltas))
        steal, total = steal + sum(d[2] for d in deltas), total + sum(d[1] for d in deltas)
    out: dict[str, Any] = {"busy_cores": {"mean": round(statistics.fmean(busy), 2), "p90": round(percentile(busy, 90), 2)},
                           "steal_share": round(steal / max(total, 1), 4)}
    mhz = [statistics.fmean(m.values()) for _, m in samples if m]
    if mhz:
        out["mhz_median"] = round(statistics.median(mhz), 1)
    first, last = samples[0][0], samples[-1][0]
    watched = {}
    for core in watch:
        if core in first and core in last:
            clock = [m[core] for _, m in samples if core in m]
            watched[core] = {"busy_share": round((last[core][0] - first[core][0]) / max(last[core][1] - first[core][1], 1), 3),
                             "mhz_median": round(statistics.median(clock), 1) if clock else None}
    return out | ({"watched": watched} if watched else {})


class ParentLoad:
    """Use as a context manager around the run; :meth:`summary` afterwards. ``watch``: cores whose own busy
    share and clock to report (the timed cores)."""

    def __init__(self, sleep_s: float = PROBE_SLEEP_S, watch: Sequence[int] = (), stacks: bool = False) -> None:
        self.sleep_s, self.watch = sleep_s, list(watch)
        # stacks: at each wake-up, where each device loop's thread is (stack_key), counted: the split of the
        # device loop's time between waiting for its workers and the parent's own work, by function
        self.stacks = stacks
        self.leaves: Counter[str] = Counter()
        self.chains: Counter[str] = Counter()
        self.procs: list[tuple[int, float]] = []  # (processes in /proc, ms to read them all as procfs does)
        self.host: list[tuple[dict[int, tuple[int, int, int]], dict[int, float]]] = []
        self.late_s: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._probe, name="cudal1-parent-load", daemon=True)
        self._cpu_ns: dict[int, int] = {}  # by thread id: the CPU time last read
        self._names: dict[int, str] = {}
        self._cpu0: dict[int, int] = {}

    def _probe(self) -> None:
        while not self._stop.is_set():
            t0 = time.perf_counter()
            time.sleep(self.sleep_s)
            self.late_s.append(max(0.0, time.perf_counter() - t0 - self.sleep_s))
            if self.stacks:
                self._sample_stacks()
            if len(self.late_s) % THREADS_EVERY == 0:
                self._read_threads()

    def _sample_stacks(self) -> None:
        loops = {t.ident for t in threading.enumerate() if t.name.startswith("cudal1-eval")}
        for ident, frame in sys._current_frames().items():
            if ident in loops:
                leaf, chain = stack_key(frame)
                self.leaves[leaf] += 1
                self.chains[chain] += 1

    def _read_threads(self) -> None:
        self.host.append((cpu_jiffies(), cpu_mhz()))
        if self.stacks:
            t0 = time.perf_counter()
            self.procs.append((len(processes()), (time.perf_counter() - t0) * 1e3))
        now = sample(os.getpid())
        if now is None:
            return
        names = {t.native_id: t.name for t in threading.enumerate()}
        for tid, (cpu, _wait) in now.threads.items():
            self._cpu_ns[tid] = cpu
            if tid in names:  # a thread torch or a library started has no Python name
                self._names[tid] = names[tid]

    def threads_cpu_s(self) -> dict[str, float]:
        """CPU seconds during the run by thread group (the name without its numbers: every
        ``ThreadPoolExecutor-3_0`` is one group, ``other`` the threads Python did not start), largest first."""
        groups: dict[str, float] = {}
        for tid, cpu in self._cpu_ns.items():
            name = re.sub(r"[-_]\d+(?=[-_]|$)", "", self._names.get(tid, "other"))
            groups[name] = groups.get(name, 0.0) + (cpu - self._cpu0.get(tid, 0)) / 1e9
        return {k: round(v, 2) for k, v in sorted(groups.items(), key=lambda kv: -kv[1]) if v >= 0.01}

    def __enter__(self) -> ParentLoad:
        self._times0, self._wall0 = os.times(), time.perf_counter()
        before = sample(os.getpid())
        self.host.append((cpu_jiffies(), cpu_mhz()))
        self._cpu0 = {tid: cpu for tid, (cpu, _) in before.threads.items()} if before else {}
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._read_threads()  # the threads still running, before the probe stops
        self._stop.set()
        self._thread.join()
        t1 = os.times()
        self.wall_s = time.perf_counter() - self._wall0
        self.cpu_s = (t1.user - self._times0.user) + (t1.system - self._times0.system)

    def summary(self) -> dict[str, Any]:
        """cpu_s and cpu_share (of one core over the wall); late_ms (median, p90, max of the probe's
        wake-ups) and late_share (the probe's lateness summed, over the wall: the share of the run in which a
        thread of the parent waited for the lock); threads_cpu_s; host (:func:`host_summary`)."""
        out: dict[str, Any] = {"cpu_s": round(self.cpu_s, 1), "cpu_share": round(self.cpu_s / max(self.wall_s, 1e-9), 3)}
        if self.late_s:
            out |= {"late_ms": {"median": round(statistics.median(self.late_s) * 1e3, 3),
                                "p90": round(percentile(self.late_s, 90) * 1e3, 3), "max": round(max(self.late_s) * 1e3, 3)},
                    "late_share": round(sum(self.late_s) / max(self.wall_s, 1e-9), 3), "wakeups": len(self.late_s),
                    "threads_cpu_s": self.threads_cpu_s()}
        host = host_summary(self.host, self.watch)
        if self.stacks and self.leaves:
            total = sum(self.leaves.values())
            out["stacks"] = {"samples": total,
                             "leaves": {k: round(v / total, 4) for k, v in self.leaves.most_common(30)},
                             "chains": {k: round(v / total, 4) for k, v in self.chains.most_common(40)}}
        if self.procs:
            counts, ms = [p for p, _ in self.procs], [m for _, m in self.procs]
            out["host_processes"] = {"median": statistics.median(counts), "max": max(counts),
                                     "scan_ms_median": round(statistics.median(ms), 3), "scan_ms_max": round(max(ms), 3)}
        return out | ({"host": host} if host else {})


def timed_cores(devices: list[str]) -> dict[str, dict[str, Any]]:
    """Each CUDA device's timed core and that core's hyperthread siblings (from /sys), as the workers of
    this process's affinity will get them; empty where the cores are left to the scheduler."""
    cores: dict[str, dict[str, Any]] = {}
    for device in devices:
        core = timed_core(device)  # None off CUDA too (no core named for it)
        if core is None:
            continue
        siblings = Path(f"/sys/devices/system/cpu/cpu{core}/topology/thread_siblings_list")
        cores[device] = {"core": core, "siblings": siblings.read_text().strip() if siblings.exists() else ""}
    return cores
