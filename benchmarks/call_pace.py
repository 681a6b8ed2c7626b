"""Does the host's pace, read right before each timed call, explain a launch-bound row's movement?

On an idle 16-core H200 host the timed core's pace (cudal1/evaluator/pace.py's fixed Python work) switches
between two levels 1.6x apart in spells of a median 21-31 ms (docs/gpu-runs.md#2026-11-29-pace-spells):
shorter than one timed batch (about 40 ms), so a trial's calls mix both levels in a share that changes from
one second to the next, and a launch-bound program's median follows that share. The evaluator reads the
pace only around a batch (two instants), which cannot see the mixture inside it.

This times, in one process pinned as a timed worker is, a release reference eagerly (A: the host launches
every kernel) against the same forward replayed as one CUDA graph (B: one launch, what a fused candidate
looks like to the host), batch by batch as the evaluator does (order a coin flip per trial), with a short
probe of the same Python work (``--probe-n`` steps, about 15 us at a fast pace) right before each call,
outside its time. A call is read at the fast pace when its probe is within ``FAST_SLACK`` of the row's
10th percentile of probes. Per trial it takes the ratio of medians over all calls (the evaluator's figure)
and over the fast calls only (where each side has enough of them); per evaluation the median of each; and
between the evaluations of a row, ``--gap-s`` apart, how far each figure falls apart pairwise, as two runs'
agreement is read.

    PYTHONPATH=. python3 benchmarks/call_pace.py --release carry/h100.jsonl --rows L2-41,L2-70,L2-99 \
        --evaluations 6 --json $OUT/call-pace.json

Problem code only (trusted references); no candidate runs here. Off the GPU (``--device cpu``) B is the
same eager forward: the ratio is 1 and only the split by pace means much.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.interleave import eager_and_replay, pairwise, row_arguments, run_rows  # noqa: E402  the pair timed; disagreement; the row loop
from cudal1.evaluator.pace import FAST_SLACK, fast_ratio, probe_ms  # noqa: E402  the evaluator's own rule
from cudal1.reports import percentile  # noqa: E402

_rng = random.Random(0)


def probed_calls(call: Callable[[], Any], calls: int, sync: Callable[[], None], flush: Callable[[], None],
                 probe_n: int) -> list[tuple[float, float]]:
    """(probe µs, call ms) for each of ``calls`` calls timed as the loop times them: L2 flush, probe, device
    idle, host clock, call, device-wide sync. The probe is outside the call's time."""
    out = []
    for _ in range(calls):
        flush()
        pace = probe_ms(probe_n) * 1e3
        sync()
        t0 = time.perf_counter()
        call()
        sync()
        out.append((pace, (time.perf_counter() - t0) * 1e3))
    return out


def trial_fast_ratio(a: list[tuple[float, float]], b: list[tuple[float, float]], fast_us: float) -> float | None:
    """A trial's ratio over the calls read at the fast pace (cudal1.evaluator.pace.fast_ratio, the rule
    EvalConfig.call_pace records), from its (probe, ms) calls of A and of B.

    >>> a = [(10.0, 2.0), (10.0, 2.2), (10.0, 2.1), (16.0, 3.5), (16.0, 3.6)]
    >>> b = [(10.0, 1.0), (10.0, 1.0), (16.0, 1.1), (10.0, 1.0)]
    >>> trial_fast_ratio(a, b, 12.0), trial_fast_ratio(a[2:], b, 12.0) is None
    (2.1, True)
    """
    return fast_ratio([ms for _, ms in a], [p for p, _ in a], [ms for _, ms in b], [p for p, _ in b], fast_us)


def split_by_pace(calls: list[tuple[float, float]], fast_us: float) -> dict[str, Any]:
    """Median call ms at the fast pace and at the slow one, and the share of calls read fast.

    >>> split_by_pace([(10.0, 2.0), (16.0, 3.0), (10.0, 2.2)], 12.0)
    {'fast_share': 0.667, 'fast_ms': 2.1, 'slow_ms': 3.0}
    """
    fast = [ms for p, ms in calls if p <= fast_us]
    slow = [ms for p, ms in calls if p > fast_us]
    return {"fast_share": round(len(fast) / max(len(calls), 1), 3),
            "fast_ms": round(statistics.median(fast), 5) if fast else None,
            "slow_ms": round(statistics.median(slow), 5) if slow else None}


def measure_row(model: torch.nn.Module, inputs: list[Any], evaluations: int, trials: int, gap_s: float,
                cuda: bool, probe_n: int, target_trial_ms: float = 40.0) -> dict[str, Any]:
    """One row's evaluations: every call with its probe, then each evaluation's figures both ways."""
    pair, why = eager_and_replay(model, inputs, cuda, target_trial_ms)
    if pair is None:
        return {"graph_error": why}
    eager, replay, sync, flush, calls = pair.eager, pair.replay, pair.sync, pair.flush, pair.calls
    with torch.no_grad():
        evs: list[list[tuple[list[tuple[float, float]], list[tuple[float, float]]]]] = []
        for _ in range(evaluations):
            pairs = []
            for _ in range(trials):
                got: dict[str, list[tuple[float, float]]] = {}
                for name in (["a", "b"] if _rng.random() < 0.5 else ["b", "a"]):
                    prog = eager if name == "a" else replay
                    prog()  # the warm-up call before each batch, as the harness makes one
                    got[name] = probed_calls(prog, calls, sync, flush, probe_n)
                pairs.append((got["a"], got["b"]))
            evs.append(pairs)
            time.sleep(gap_s)
    probes = [p for pairs in evs for a, b in pairs for p, _ in a + b]
    fast_us = FAST_SLACK * percentile(probes, 10)
    every_a = [c for pairs in evs for a, _ in pairs for c in a]
    every_b = [c for pairs in evs for _, b in pairs for c in b]
    out: dict[str, Any] = {"calls_per_trial": calls, "fast_probe_us": round(fast_us, 2),
                           # every call as (probe µs, ms), by evaluation and trial, A then B: another rule
                           # (a floor kept across rows, fewer fast calls a trial) can be replayed on them
                           "calls": [[[[[round(p, 2), round(ms, 5)] for p, ms in side] for side in pair] for pair in pairs]
                                     for pairs in evs],
                           "probe_us": {"p10": round(percentile(probes, 10), 2), "median": round(statistics.median(probes), 2),
                                        "p90": round(percentile(probes, 90), 2)},
                           "a_by_pace": split_by_pace(every_a, fast_us), "b_by_pace": split_by_pace(every_b, fast_us),
                           "evaluations": []}
    for pairs in evs:
        every = [statistics.median(m for _, m in a) / max(statistics.median(m for _, m in b), 1e-9) for a, b in pairs]
        fast = [r for a, b in pairs if (r := trial_fast_ratio(a, b, fast_us)) is not None]
        out["evaluations"].append({"speedup": round(statistics.median(every), 5),
                                   "fast_speedup": round(statistics.median(fast), 5) if fast else None,
                                   "fast_trials": len(fast),
                                   "fast_share": round(sum(p <= fast_us for a, b in pairs for p, _ in a + b)
                                                       / sum(len(a) + len(b) for a, b in pairs), 3)})
    out["agreement"] = pairwise([e["speedup"] for e in out["evaluations"]])
    fast_figures = [e["fast_speedup"] for e in out["evaluations"] if e["fast_speedup"] is not None]
    out["fast_agreement"] = pairwise(fast_figures)
    return out


def summary(rows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Over the rows measured: the median of the rows' pairwise median and p95 disagreement, every call's
    figure against the fast calls' figure, and how many evaluations had no fast figure."""
    got = [r for r in rows.values() if "agreement" in r]
    if not got:
        return {}

    def med(key: str, stat: str) -> float:
        return round(statistics.median(r[key][stat] or 0.0 for r in got), 4)

    return {"rows": len(got), "every_call": {"median": med("agreement", "median"), "p95": med("agreement", "p95")},
            "fast_calls": {"median": med("fast_agreement", "median"), "p95": med("fast_agreement", "p95")},
            "evaluations_without_fast_figure": sum(e["fast_speedup"] is None for r in got for e in r["evaluations"])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    row_arguments(ap, "row")
    ap.add_argument("--probe-n", type=int, default=300, help="steps of the probe before each call")
    args = ap.parse_args()
    run_rows(args, "call_pace.py",
             lambda model, inputs, cuda: measure_row(model, inputs, args.evaluations, args.trials, args.gap_s, cuda,
                                                     args.probe_n),
             lambda row: {k: row.get(k) for k in ("calls_per_trial", "a_by_pace", "b_by_pace", "agreement", "fast_agreement")},
             summary, header={"probe_n": args.probe_n}, indent=None)


if __name__ == "__main__":
    main()
