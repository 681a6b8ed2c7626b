"""Where an evaluation's time went, from the evaluations a GPU run left (a reproduction pool's
measurements.jsonl, or release_eval.py's results.jsonl). Runs anywhere with this package, no GPU:

    python benchmarks/pool_phases.py docs/reproduction/pools/a61a47dc306b/gpu-h100/measurements.jsonl \
        --release ../shared/cuda-l1/h100.jsonl

Prints, over the evaluations measured ok: each phase's sum and median (load, correctness, timing, the
wait for loads ahead, the first call made while loading ahead when there was one, and where a load's own
wall went: waiting for its worker's start, then the load command); the same by the
reference's time per call; by candidate origin (the released program, each baseline rewrite), with the
correctness phase's median difference from the same row's CUDA-graph baseline (what a program's first
call costs beyond a plain eager rewrite's); and how often the adaptive timing ran to its trial ceiling,
with the 95% interval's median half-width there. ``--json`` writes the same figures.

``--paired OTHER`` compares the same candidates measured in another run (another measurements file): over
those ok in both, each phase's sum in either run, and how far their speedups agree (median and 95th
percentile of |delta|/speedup, verdict changes among all the candidates in both).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cudal1.candidates import Evaluation, load_evaluations  # noqa: E402
from cudal1.problems import load_cudal1_release  # noqa: E402
from cudal1.reproduction import BASELINES, release_inputs  # noqa: E402

PHASES = ("load_s", "correctness_s", "timing_s", "wait_s", "first_call_s",
          "ready_wait_s", "load_cmd_s",  # these two: a load's wait for its worker's start, its command
          # the device's time before the evaluation, outside it: a ready group, the group's reference, the
          # candidate's build, the start of what comes next (none in records made before they were booked)
          "group_wait_s", "reference_wait_s", "build_wait_s", "prepare_s",
          "prebuild_s")  # the candidate's build in the batch's pool, beside the device (pauses included)
# Reference time per call (ms): launch-bound rows below 0.3 ms, memory- or compute-bound above
BINS = ((0.0, 0.05), (0.05, 0.1), (0.1, 0.3), (0.3, 1.0), (1.0, 5.0), (5.0, float("inf")))
GRAPH = "template:cuda_graph"


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def _phases(evals: list[Evaluation]) -> dict[str, Any]:
    out: dict[str, Any] = {"evaluations": len(evals), "eval_s_sum": round(sum(e.eval_s or 0 for e in evals), 1)}
    for phase in PHASES:
        values = [float(e.extra[phase]) for e in evals if phase in e.extra]
        if values:
            out[phase] = {"sum": round(sum(values), 1), "median": _median(values), "n": len(values)}
    return out


def _half_width(e: Evaluation) -> float | None:
    if not (e.speedup and e.speedup_low and e.speedup_high):
        return None
    return (e.speedup_high - e.speedup_low) / 2 / e.speedup


def phases(evals: list[Evaluation], origin: dict[str, str]) -> dict[str, Any]:
    """The figures above, for the evaluations measured ok.

    >>> from cudal1.candidates import Status
    >>> def row(cid, corr, trials, first=None):
    ...     extra = {"correctness_s": corr, "timing_s": 1.0} | ({"first_call_s": first} if first else {})
    ...     return Evaluation("L1-1", cid, Status.OK, speedup=1.0, speedup_low=0.9, speedup_high=1.1,
    ...                       reference_ms=0.2, trials=trials, eval_s=2.0, extra=extra)
    >>> r = phases([row("g", 0.5, 15), row("p", 0.8, 5, first=0.3)], {"g": GRAPH, "p": "cudal1-h100"})
    >>> r["by_origin"]["cudal1-h100"]["correctness_minus_cuda_graph_median"], r["all"]["first_call_s"]["sum"]
    (0.3, 0.3)
    >>> r["timing"]["at_ceiling"], r["by_reference_ms"]["0.1-0.3"]["interval_half_width_median"]
    (1, 0.1)
    """
    ok = [e for e in evals if e.ok]
    ceiling = max((e.trials or 0 for e in ok), default=0)  # the most trials any evaluation ran
    report: dict[str, Any] = {"all": _phases(ok), "by_reference_ms": {}, "by_origin": {}}
    for lo, hi in BINS:
        chosen = [e for e in ok if e.reference_ms is not None and lo <= e.reference_ms < hi]
        widths = [w for e in chosen if (w := _half_width(e)) is not None]
        report["by_reference_ms"][f"{lo:g}-{hi:g}"] = _phases(chosen) | {
            "at_trial_ceiling": sum(1 for e in chosen if e.trials == ceiling),
            "interval_half_width_median": _median(widths)}
    by_row: dict[str, dict[str, Evaluation]] = defaultdict(dict)
    for e in ok:
        by_row[e.problem_id][origin.get(e.candidate_id, "unknown")] = e
    for name in sorted({origin.get(e.candidate_id, "unknown") for e in ok}):
        chosen = [rows[name] for rows in by_row.values() if name in rows]
        paired = [float(rows[name].extra["correctness_s"]) - float(rows[GRAPH].extra["correctness_s"])
                  for rows in by_row.values() if name in rows and GRAPH in rows and name != GRAPH
                  and "correctness_s" in rows[name].extra and "correctness_s" in rows[GRAPH].extra]
        report["by_origin"][name] = _phases(chosen) | (
            {"correctness_minus_cuda_graph_median": _median(paired), "paired_rows": len(paired)} if paired else {})
    at = [e for e in ok if e.trials == ceiling]
    report["timing"] = {"trial_ceiling": ceiling, "at_ceiling": len(at), "of": len(ok),
                        "half_width_median_at_ceiling": _median([w for e in at if (w := _half_width(e)) is not None])}
    return report


def paired(evals: list[Evaluation], other: list[Evaluation]) -> dict[str, Any]:
    """The same candidates in two runs (matched by problem and source hash): the phases summed over those
    ok in both, and their agreement as release_bench.agreement reckons it (|delta|/speedup against
    ``other``; verdict changes leave out the harness's failures, which are no verdict). ``ratios``: over
    those ok in both, the median of this run's figure over the other's for the host's own pace on the timed
    core (pace.py: a fixed piece of Python work, no device in it), the reference's and the candidate's time
    per call: a host whose CPU runs slower shows in the first and in the phases, not in the device's times.

    >>> from cudal1.candidates import Status
    >>> def row(cid, speedup, corr, status=Status.OK):
    ...     return Evaluation("L1-1", cid, status, speedup=speedup, candidate_sha256=cid, eval_s=2.0,
    ...                       reference_ms=0.2, extra={"correctness_s": corr, "host_pace_ms": corr})
    >>> r = paired([row("a", 1.0, 0.2), row("b", 2.2, 0.3), row("c", 1.0, 0.1)],
    ...            [row("a", 1.0, 0.5), row("b", 2.0, 0.4), row("c", None, 0.1, Status.INCORRECT)])
    >>> r["both_ok"], r["run"]["correctness_s"], r["other"]["correctness_s"], r["verdict_changes"]
    (2, 0.5, 0.9, 1)
    >>> r["agreement_median"], r["agreement_p95"], r["ratios"]
    (0.05, 0.1, {'host_pace_ms': 0.575, 'reference_ms': 1.0, 'candidate_ms': None})
    """
    from benchmarks.release_bench import agreement

    mine = {f"{e.problem_id}:{e.candidate_sha256}": e for e in evals}
    theirs = {f"{e.problem_id}:{e.candidate_sha256}": e for e in other}
    found = agreement(theirs, mine)
    both = [k for k in mine.keys() & theirs.keys() if all(e.ok and e.speedup is not None for e in (mine[k], theirs[k]))]

    def sums(side: list[Evaluation]) -> dict[str, float]:
        out = {p: round(sum(float(e.extra.get(p, 0.0) or 0.0) for e in side), 1) for p in PHASES}
        return out | {"eval_s": round(sum(e.eval_s or 0.0 for e in side), 1)}

    def ratio(value: Callable[[Evaluation], Any]) -> float | None:
        values = [float(value(mine[k])) / float(value(theirs[k])) for k in both if value(mine[k]) and value(theirs[k])]
        return _median(values)

    ratios = {"host_pace_ms": ratio(lambda e: e.extra.get("host_pace_ms")),
              "reference_ms": ratio(lambda e: e.reference_ms), "candidate_ms": ratio(lambda e: e.candidate_ms)}
    return {"in_both": len(mine.keys() & theirs.keys()), "both_ok": found["rows"], "ratios": ratios,
            "verdict_changes": len(found["flips"]), "verdict_changes_at_tolerance_edge": len(found["edge_flips"]),
            "run": sums([mine[k] for k in both]), "other": sums([theirs[k] for k in both]),
            "agreement_median": _round(found["median"]), "agreement_p95": _round(found["p95"]),
            "in_other_interval": _round(found["inside"]), "intervals_overlap": _round(found["overlap"])}


def _round(value: float | None) -> float | None:
    return round(value, 3) if value is not None else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("evaluations", type=Path, help="measurements.jsonl or results.jsonl")
    ap.add_argument("--release", type=Path, help="the CUDA-L1 release file the candidates came from (origins)")
    ap.add_argument("--json", type=Path, help="write the figures here too")
    ap.add_argument("--paired", type=Path, help="another run's measurements of the same candidates, to compare")
    args = ap.parse_args()
    origin: dict[str, str] = {}
    if args.release:
        _problems, candidates = release_inputs(load_cudal1_release(args.release), list(BASELINES))
        origin = {c.candidate_id: c.origin for c in candidates}
    report = phases(load_evaluations(args.evaluations), origin)
    print(f"{'group':<40} {'n':>4} " + " ".join(f"{p.removesuffix('_s'):>17}" for p in PHASES) + "  (sum s / median s)")
    groups = {"all": report["all"]} | {f"reference {k} ms": v for k, v in report["by_reference_ms"].items()} \
        | {f"origin {k}": v for k, v in report["by_origin"].items()}
    for name, g in groups.items():
        cells = [f"{g[p]['sum']:>8.0f} / {g[p]['median']:<6.3f}" if p in g else f"{'-':>17}" for p in PHASES]
        notes = [f"{k}={g[k]}" for k in ("at_trial_ceiling", "interval_half_width_median",
                                          "correctness_minus_cuda_graph_median", "paired_rows") if k in g]
        print(f"{name:<40} {g['evaluations']:>4} " + " ".join(cells) + ("  " + " ".join(notes) if notes else ""))
    print("timing:", json.dumps(report["timing"]))
    if args.paired:
        report["paired"] = paired(load_evaluations(args.evaluations), load_evaluations(args.paired))
        print("paired:", json.dumps(report["paired"]))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
