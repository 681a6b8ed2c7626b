"""Whether the host CPU's fast and slow spells are one core's or the whole host's.

On the GPU hosts the pace of a fixed piece of Python work on the timed core switches between two levels
about 1.6x apart in spells of tens of milliseconds, and over minutes the share of the slow level moves
(docs/gpu-runs.md#2026-11-29-pace-spells). If the spells were each core's own, the timed workers could be
put on a core that is fast now; if the host switches as a whole, no choice of core helps. This reads the
pace on several cores at once, each reader a process pinned to its core, back to back with no sleep, for
``--seconds`` a group:

    PYTHONPATH=. python3 benchmarks/core_pace.py --groups "0,1,2,3;4,5,6,7;8,9,10,11;12,13,14,15;all" --json $OUT/core-pace.json

Each core's readings are put in ``--bin-ms`` bins (the median reading a bin); a bin is fast where it is
within FAST_SLACK of the host's floor (the 1st percentile of every reading of the group). Per core: the
fast share and the median fast and slow spell (ms). Per group: how often two cores are in the same level
against what independent cores would give (``same_level`` against ``independent``), the pairs' mean
correlation of their fast indicators, and the share of bins in which at least one core was fast (what a
worker that could always move to a fast core would see). Standard library and the core only.
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.graph_levels import correlation  # noqa: E402
from cudal1.evaluator.pace import CALL_PROBE_STEPS, FAST_SLACK, probe_ms  # noqa: E402


def _read(core: int, start: float, seconds: float, out: Any) -> None:
    """Pinned to ``core``: readings (seconds since ``start``, ms) back to back until ``seconds`` have passed."""
    os.sched_setaffinity(0, {core})
    while time.time() < start:
        pass
    readings = []
    end = start + seconds
    while (now := time.time()) < end:
        readings.append((now - start, probe_ms(CALL_PROBE_STEPS)))
    out.put((core, readings))


def read_group(cores: list[int], seconds: float) -> dict[int, list[tuple[float, float]]]:
    """Every core's readings, all cores reading over the same seconds."""
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    start = time.time() + 0.5  # every reader pinned and waiting before any reads
    procs = [ctx.Process(target=_read, args=(c, start, seconds, out)) for c in cores]
    for p in procs:
        p.start()
    got = dict(out.get() for _ in procs)
    for p in procs:
        p.join()
    return got


def binned(readings: list[tuple[float, float]], bin_ms: float, bins: int) -> list[float | None]:
    """The median reading of each ``bin_ms`` bin (None where a bin has none)."""
    slots: list[list[float]] = [[] for _ in range(bins)]
    for t, ms in readings:
        i = int(t * 1e3 / bin_ms)
        if 0 <= i < bins:
            slots[i].append(ms)
    return [statistics.median(s) if s else None for s in slots]


def spells(levels: list[bool], bin_ms: float) -> dict[str, float | None]:
    """Median length (ms) of the runs of fast and of slow bins.

    >>> spells([True, True, False, True, False, False, False], 5.0)
    {'fast_ms': 7.5, 'slow_ms': 10.0}
    """
    runs: dict[bool, list[int]] = {True: [], False: []}
    for level, group in itertools.groupby(levels):
        runs[level].append(len(list(group)))
    return {name: (statistics.median(runs[level]) * bin_ms if runs[level] else None)
            for name, level in (("fast_ms", True), ("slow_ms", False))}


def summarize(got: dict[int, list[tuple[float, float]]], seconds: float, bin_ms: float) -> dict[str, Any]:
    """Per core and across the group, as the module says."""
    every = sorted(ms for readings in got.values() for _, ms in readings)
    floor = every[len(every) // 100]
    bins = int(seconds * 1e3 / bin_ms)
    series = {c: binned(r, bin_ms, bins) for c, r in got.items()}
    full = [i for i in range(bins) if all(s[i] is not None for s in series.values())]
    fast = {c: [s[i] <= FAST_SLACK * floor for i in full] for c, s in series.items()}  # type: ignore[operator]
    cores = {str(c): {"readings": len(got[c]), "median_ms": round(statistics.median(ms for _, ms in got[c]), 5),
                      "fast_share": round(sum(f) / max(len(f), 1), 3)} | spells(f, bin_ms) for c, f in fast.items()}
    pairs = list(itertools.combinations(sorted(fast), 2))
    # a bin counts only where every core has a reading (a reader descheduled for a bin has none there)
    same = [sum(a == b for a, b in zip(fast[x], fast[y])) / len(full) for x, y in pairs] if full else []
    shares = {c: sum(f) / max(len(f), 1) for c, f in fast.items()}
    independent = [shares[x] * shares[y] + (1 - shares[x]) * (1 - shares[y]) for x, y in pairs]
    r = [correlation([float(v) for v in fast[x]], [float(v) for v in fast[y]], digits=3) for x, y in pairs]
    return {"floor_ms": round(floor, 5), "bins": len(full), "cores": cores,
            "same_level": round(statistics.mean(same), 3) if same else None,
            "independent": round(statistics.mean(independent), 3) if independent else None,
            "mean_r": round(statistics.mean(v for v in r if v is not None), 3) if any(v is not None for v in r) else None,
            "any_fast_share": round(sum(any(f[i] for f in fast.values()) for i in range(len(full))) / max(len(full), 1), 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--groups", default="0,1,2,3;4,5,6,7;8,9,10,11;12,13,14,15;all",
                    help="';'-separated groups of cores read together ('all': every core this process may use)")
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--bin-ms", type=float, default=5.0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    allowed = sorted(os.sched_getaffinity(0))
    report = []
    for spec in args.groups.split(";"):
        cores = allowed if spec == "all" else [int(c) for c in spec.split(",") if int(c) in allowed]
        if not cores:
            continue
        row = {"cores": cores, "seconds": args.seconds} | summarize(read_group(cores, args.seconds), args.seconds, args.bin_ms)
        report.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "cores"} | {"group": spec}), flush=True)
        if args.json:
            args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
