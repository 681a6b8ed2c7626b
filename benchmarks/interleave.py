"""Would timing the two programs of a pair call by call, instead of batch by batch, make a row's speedup
repeat? The evaluator times a trial as one batch of the reference's calls and one of the candidate's
(about 40 ms each, in random order) and takes the ratio of their medians. Over the H100 release's cold
and warm runs a trial's ratio moved by a robust 3-5% within an evaluation while the two batches' own
medians moved together only at r 0.4-0.5 (`agreement_split.py`'s noise budget): the host's speed changes
faster than a pair of batches lasts, and the launch-bound side follows it more than the other.

This times, in one process pinned as a timed worker is, a release reference eagerly (A: the host launches
every kernel) against the same forward replayed as one CUDA graph (B: the same device work, one launch,
what a fused candidate looks like to the host), in two schemes that differ only in how the calls
alternate: ``batch`` (A's calls, then B's, order a coin flip per trial) and ``call`` (A, B, A, B, ...,
order a coin flip per pair). Each evaluation is ``--trials`` trials of the same calls per trial; the
evaluations of the two schemes alternate, ``--gap-s`` apart (the other rows of a run). Per scheme it
reports the trials' ratio spread within an evaluation and how far the evaluations' medians fall apart,
pairwise, as two runs' agreement is read (median and 95th percentile of |delta| / speedup).

    PYTHONPATH=. python3 benchmarks/interleave.py --release carry/h100.jsonl --rows L2-41,L2-70,L1-64 \
        --evaluations 6 --json $OUT/interleave.json

Problem code only (trusted references); no candidate runs here. One process: a call-by-call scheme in
the evaluator would also switch between two processes on the core at every call, which this leaves out.
Off the GPU (``--device cpu``) B is the same eager forward: the ratio is 1 and only the spreads mean much.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.agreement_noise import p95, robust_sd  # noqa: E402
from benchmarks.core_noise import load  # noqa: E402  a reference and its inputs
from benchmarks.graph_levels import captured, pinned_rows  # noqa: E402  the forward as one CUDA graph; setup

SCHEMES = ("batch", "call")
_rng = random.Random(0)


def _timed(call: Callable[[], Any], sync: Callable[[], None], before: Callable[[], None]) -> float:
    """One call as the timed loop takes it: L2 flush (outside the time), device idle, host clock, call,
    device-wide sync. Milliseconds."""
    before()
    sync()
    t0 = time.perf_counter()
    call()
    sync()
    return (time.perf_counter() - t0) * 1e3


def trial(a: Callable[[], Any], b: Callable[[], Any], calls: int, scheme: str, sync: Callable[[], None],
          flush: Callable[[], None]) -> tuple[float, float]:
    """Median ms per call of A and of B over one trial of ``calls`` calls each, alternated by ``scheme``."""
    ms: dict[str, list[float]] = {"a": [], "b": []}
    progs = {"a": a, "b": b}
    if scheme == "batch":
        order = ["a", "b"] if _rng.random() < 0.5 else ["b", "a"]
        for name in order:
            progs[name]()  # the warm-up call before each batch, as the harness makes one
            ms[name] += [_timed(progs[name], sync, flush) for _ in range(calls)]
    elif scheme == "call":
        a(), b()
        for _ in range(calls):
            for name in (["a", "b"] if _rng.random() < 0.5 else ["b", "a"]):
                ms[name].append(_timed(progs[name], sync, flush))
    else:
        raise ValueError(f"unknown scheme {scheme!r}: use one of {', '.join(SCHEMES)}")
    return statistics.median(ms["a"]), statistics.median(ms["b"])


def spread(xs: list[float]) -> float:
    """Robust relative spread: 1.4826 x the median absolute deviation of log(x) (a normal's sd).

    >>> spread([1.0, 1.0, 1.0]), round(spread([0.9, 1.0, 1.1, 1.0, 1.02]), 3)
    (0.0, 0.029)
    """
    return round(robust_sd([math.log(x) for x in xs]), 4)


def pairwise(medians: list[float]) -> dict[str, float | int | None]:
    """|delta| / speedup over every pair of evaluations (the smaller one's figure as the base, as two
    runs' agreement is read): median and 95th percentile.

    >>> pairwise([1.0, 1.1, 1.0])
    {'pairs': 3, 'median': 0.1, 'p95': 0.1}
    """
    ds = sorted(abs(x - y) / min(x, y) for x, y in itertools.combinations(medians, 2) if min(x, y) > 0)
    if not ds:
        return {"pairs": 0, "median": None, "p95": None}
    return {"pairs": len(ds), "median": round(statistics.median(ds), 4), "p95": round(p95(ds), 4)}


@dataclass(frozen=True)
class Pair:
    """A reference's forward eager (A) and replayed as one CUDA graph (B, the eager forward again off the
    GPU), warmed up, with the loop's sync and L2 flush and the calls a trial makes of each."""

    eager: Callable[[], Any]
    replay: Callable[[], Any]
    sync: Callable[[], None]
    flush: Callable[[], None]
    calls: int


def eager_and_replay(model: torch.nn.Module, inputs: list[Any], cuda: bool,
                     target_trial_ms: float = 40.0) -> tuple[Pair | None, str]:
    """The pair both schemes here (and benchmarks/call_pace.py) time, or None and why the forward could not
    be captured. Calls per trial from the slower side, as the evaluator's calibration does."""
    sync = torch._C._cuda_synchronize if cuda else (lambda: None)
    flush_buf = torch.empty(64 << 20, dtype=torch.uint8, device="cuda") if cuda else None
    flush: Callable[[], None] = (lambda: flush_buf.zero_()) if flush_buf is not None else (lambda: None)
    with torch.no_grad():
        for _ in range(5):
            model(*inputs)

        def eager() -> Any:
            return model(*inputs)

        replay, why = captured(model, inputs) if cuda else (eager, "")
        if replay is None:
            return None, why
        slowest = max(statistics.median(_timed(f, sync, flush) for _ in range(5)) for f in (eager, replay))
    return Pair(eager, replay, sync, flush, int(min(200, max(3, target_trial_ms // max(slowest, 1e-3))))), ""


def measure_row(model: torch.nn.Module, inputs: list[Any], evaluations: int, trials: int, gap_s: float,
                cuda: bool, target_trial_ms: float = 40.0) -> dict[str, Any]:
    """Both schemes' evaluations of one row, alternating (which scheme goes first alternates too)."""
    pair, why = eager_and_replay(model, inputs, cuda, target_trial_ms)
    if pair is None:
        return {"graph_error": why}
    eager, replay, sync, flush, calls = pair.eager, pair.replay, pair.sync, pair.flush, pair.calls
    with torch.no_grad():
        out: dict[str, Any] = {"calls_per_trial": calls}
        runs: dict[str, list[dict[str, Any]]] = {s: [] for s in SCHEMES}
        for e in range(evaluations):
            for scheme in (SCHEMES if e % 2 == 0 else tuple(reversed(SCHEMES))):
                t0 = time.perf_counter()
                pairs = [trial(eager, replay, calls, scheme, sync, flush) for _ in range(trials)]
                ratios = [x / y for x, y in pairs]
                runs[scheme].append({"speedup": round(statistics.median(ratios), 5), "trial_spread": spread(ratios),
                                     "a_ms": round(statistics.median(x for x, _ in pairs), 5),
                                     "b_ms": round(statistics.median(y for _, y in pairs), 5),
                                     "wall_s": round(time.perf_counter() - t0, 3)})
                time.sleep(gap_s)
    for scheme, evs in runs.items():
        out[scheme] = {"evaluations": evs, "agreement": pairwise([e["speedup"] for e in evs]),
                       "trial_spread_median": round(statistics.median(e["trial_spread"] for e in evs), 4),
                       "a_ms_spread": spread([e["a_ms"] for e in evs]), "wall_s": round(sum(e["wall_s"] for e in evs), 2)}
    return out


def summary(rows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per scheme, over the rows measured: the median of the rows' pairwise median and p95 disagreement,
    and of their trials' spread."""
    out: dict[str, Any] = {}
    for scheme in SCHEMES:
        got = [r[scheme] for r in rows.values() if scheme in r]
        if got:
            out[scheme] = {"rows": len(got),
                           "agreement_median": round(statistics.median(g["agreement"]["median"] or 0.0 for g in got), 4),
                           "agreement_p95": round(statistics.median(g["agreement"]["p95"] or 0.0 for g in got), 4),
                           "trial_spread": round(statistics.median(g["trial_spread_median"] for g in got), 4)}
    return out


def row_arguments(ap: argparse.ArgumentParser, per: str) -> None:
    """The arguments every script that evaluates release references row by row takes (this one, call_pace.py);
    ``per`` says what one evaluation is counted per."""
    ap.add_argument("--release", required=True, type=Path)
    ap.add_argument("--rows", default="L2-41,L2-70,L2-69,L1-64,L2-85,L2-99")
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--evaluations", type=int, default=6, help=f"evaluations per {per}")
    ap.add_argument("--trials", type=int, default=15, help="trials per evaluation (the evaluator's ceiling)")
    ap.add_argument("--gap-s", type=float, default=1.0, help="sleep between evaluations")
    ap.add_argument("--json", type=Path, default=None)


def run_rows(args: argparse.Namespace, script: str, measure: Callable[[Any, list[Any], bool], dict[str, Any]],
             shown: Callable[[dict[str, Any]], dict[str, Any]], summarize: Callable[[dict[str, dict[str, Any]]], Any],
             header: dict[str, Any] | None = None, indent: int | None = 1) -> None:
    """Each row of ``args.rows`` on the pinned core: its reference loaded, ``measure(model, inputs, cuda)``,
    a line of ``shown(row)``; the whole result (with ``header``) written to ``args.json`` after every row, so
    a call that ends early keeps what it measured, and ``summarize``'s figure printed at the end."""
    device, cuda, core, rows = pinned_rows(args.release, args.rows, args.device, script)
    result: dict[str, Any] = {"device": torch.cuda.get_device_name(device) if cuda else "cpu", "core": core,
                              "evaluations": args.evaluations, "trials": args.trials, "gap_s": args.gap_s,
                              **(header or {}), "rows": {}}
    for pid in args.rows.split(","):
        model, inputs = load(rows[pid].source, device)
        row = measure(model, inputs, cuda)
        result["rows"][pid] = row
        print(pid, json.dumps(shown(row)), flush=True)
        del model, inputs
        if cuda:
            torch.cuda.empty_cache()
        if args.json is not None:
            args.json.write_text(json.dumps(result | {"summary": summarize(result["rows"])}, indent=indent))
    print("summary", json.dumps(summarize(result["rows"])))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    row_arguments(ap, "scheme and row")
    args = ap.parse_args()
    run_rows(args, "interleave.py",
             lambda model, inputs, cuda: measure_row(model, inputs, args.evaluations, args.trials, args.gap_s, cuda),
             lambda row: {k: ({n: v[n] for n in ("agreement", "trial_spread_median", "a_ms_spread")}
                              if isinstance(v, dict) else v) for k, v in row.items()},
             summary)


if __name__ == "__main__":
    main()
