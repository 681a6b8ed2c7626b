"""Where runs of the same rows disagree: their agreement by the reference's time per call, and, for each
row that moved, which program's own time moved. Runs anywhere, no GPU, on release_eval.py's folders:

    python benchmarks/agreement_split.py docs/benchmarks/two-gpu-h100/w-warm-one-gpu \
        docs/benchmarks/two-gpu-h100/w-warm-two-gpu docs/benchmarks/two-gpu-h100/w-warm-two-gpu-2

For every pair of runs, over the rows ok in both: |delta speedup| / speedup, pooled over the pairs and
split by the reference's time in the first run of each pair (median and 95th percentile per band), and
by whether the two evaluations read the host's pace alike (``by_pace``), and a noise budget (``noise_budget``:
each trial's own spread, the gap against the intervals, whether rows timed one after another move
together), and what measuring a row at more than one sitting would buy (``sittings``: the runs split
into two sides of k sittings each). Then each row ok in every
run whose speedups spread by more than ``--moved`` (max / min - 1): its speedups, and the spread of the
reference's and the candidate's own times. A row whose reference moved and whose candidate held follows
the host's pace through its reference (a recurrent network's thousands of launches); one whose candidate
moved alone made its own choices differently (docs/evaluator.md, "Programs that tune themselves").

A run may be several folders joined by ``+`` (``half/cold+other/cold``): the rows of two runs over
disjoint rows read as one run, so the release measured by halves gives the whole release's figures. Rows
present in every run whose status differs between runs are listed as verdict changes.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.agreement_noise import gap_summary, noise_budget, ok_pairs, p95, row_extra, sittings  # noqa: E402
from benchmarks.graph_levels import correlation, levels  # noqa: E402
from benchmarks.release_bench import agreement, verdict  # noqa: E402
from cudal1.candidates import Evaluation, Status, load_evaluations  # noqa: E402
from cudal1.evaluator.pace import FAST_SLACK, decided_speedup  # noqa: E402

BANDS_MS = (0.0, 0.05, 0.1, 0.2, 0.5, 1.0, 5.0, float("inf"))


def load(run: Path) -> dict[str, Evaluation]:
    """A run's rows by problem id, from its results.jsonl (a row evaluated more than once in one folder: its
    last evaluation, as before joins existed); ``a+b`` joins the folders' rows (disjoint rows: a row in two
    of them is an error, since which one counts would be a guess).

    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp())
    >>> for name, lines in (("a", ['{"problem_id": "L1-1", "candidate_id": "x", "status": "ok", "speedup": 1.0}',
    ...                            '{"problem_id": "L1-1", "candidate_id": "x", "status": "ok", "speedup": 2.0}']),
    ...                     ("b", ['{"problem_id": "L1-1", "candidate_id": "x", "status": "ok", "speedup": 3.0}'])):
    ...     _ = (root / name).mkdir(), (root / name / "results.jsonl").write_text("\\n".join(lines) + "\\n")
    >>> load(root / "a")["L1-1"].speedup
    2.0
    >>> load(Path(f"{root / 'a'}+{root / 'b'}"))
    Traceback (most recent call last):
    SystemExit: L1-1 is in more than one of ...
    """
    rows: dict[str, Evaluation] = {}
    # a folder whose own name holds "+" (a mirror's owner+name) is read whole
    for part in [str(run)] if run.exists() else str(run).split("+"):
        here = {e.problem_id: e for e in load_evaluations(Path(part) / "results.jsonl")}
        if twice := sorted(here.keys() & rows.keys()):
            raise SystemExit(f"{twice[0]} is in more than one of {run}'s folders: join runs of disjoint rows")
        rows |= here
    return rows


def verdict_changes(runs: list[dict[str, Evaluation]]) -> dict[str, list[str]]:
    """Rows whose verdict changed between any two runs, by release_bench's own rule (``agreement``'s flips:
    a harness failure is no verdict), with each run's verdict.

    >>> from cudal1.candidates import Evaluation, Status
    >>> a = {"p": Evaluation("p", "c", Status.OK, speedup=2.0), "q": Evaluation("q", "c", Status.INCORRECT)}
    >>> b = {"p": Evaluation("p", "c", Status.REJECTED), "q": Evaluation("q", "c", Status.INCORRECT)}
    >>> verdict_changes([a, b])
    {'p': ['ok', 'rejected']}
    """
    changed = set().union(*(agreement(a, b)["flips"] for a, b in itertools.combinations(runs, 2)))
    return {pid: [verdict(r[pid]) if pid in r else "absent" for r in runs] for pid in sorted(changed)}


def by_band(runs: list[dict[str, Evaluation]]) -> list[dict[str, Any]]:
    """Pooled pairwise agreement per band of the reference's time (ms) in the first run of each pair."""
    bands: dict[tuple[float, float], list[float]] = {b: [] for b in zip(BANDS_MS, BANDS_MS[1:])}
    for row, _, gap in ok_pairs(runs):
        for lo, hi in bands:
            if lo <= row.reference_ms < hi:  # type: ignore[operator]
                bands[(lo, hi)].append(gap)
    pairs = max(1, len(runs) * (len(runs) - 1) // 2)
    return [{"reference_ms": [lo, hi], "rows": len(g) // pairs, "median": round(statistics.median(g), 4),
             "p95": round(p95(g), 4)} for (lo, hi), g in bands.items() if g]


def by_pace(runs: list[dict[str, Evaluation]], same: float = 1.15) -> dict[str, Any]:
    """Pooled pairwise agreement of the rows whose two evaluations read the host's pace (``host_pace_ms``,
    cudal1/evaluator/pace.py) within a factor ``same`` of each other, against the rest: does the host's
    speed at the time explain the disagreement? Rows without a reading in either run are left out.

    >>> from cudal1.candidates import Evaluation
    >>> def row(s, pace): return {"r": Evaluation("r", "c", Status.OK, speedup=s, extra={"host_pace_ms": pace})}
    >>> by_pace([row(2.0, 0.10), row(2.2, 0.11)])["same_pace"]
    {'rows': 1, 'median': 0.1, 'p95': 0.1}
    """
    groups: dict[str, list[float]] = {"same_pace": [], "other_pace": []}
    for row, other, gap in ok_pairs(runs):
        paces = [row_extra(r, "host_pace_ms") for r in (row, other)]
        if all(paces):
            groups["same_pace" if max(paces) / min(paces) < same else "other_pace"].append(gap)
    return gap_summary(groups)


PACED = 1.15  # a side's slow-over-fast level ratio (call_pace.level_ratio) from which its calls follow the host


def by_call_pace(runs: list[dict[str, Evaluation]]) -> dict[str, Any]:
    """Over the rows whose evaluations both have a figure from the calls read at the host's fast pace
    (``call_pace.fast_speedup``, EvalConfig.call_pace): pooled pairwise agreement of that figure, and of
    the figure over every call on the same rows. Then, over every row ok in both, the agreement of the figure
    ``pace.decided_speedup`` would report (the fast one where its rule trusts it), with how often each reason
    decided; and every call's agreement split by whether the row's calls follow the host's pace
    (``follows_host``: a level ratio of PACED or more on either side in either run), do not
    (``device_bound``), or held one level in every trial (``one_level``). Empty where no run recorded it.

    >>> from cudal1.candidates import Evaluation
    >>> def row(s, f): return {"r": Evaluation("r", "c", Status.OK, speedup=s, extra={"call_pace": {"fast_speedup": f}})}
    >>> by_call_pace([row(2.0, 1.5), row(3.0, 1.53)])["fast_calls"]
    {'rows': 1, 'median': 0.02, 'p95': 0.02}
    """
    groups: dict[str, list[float]] = {"every_call": [], "fast_calls": [], "floor_every_call": [], "floor_fast_calls": [],
                                      "decided_every_call": [], "decided": [],
                                      "follows_host": [], "device_bound": [], "one_level": []}
    reasons: Counter[str] = Counter()
    floor_of = {id(e): floor for run in runs for floor in (_floor(run),) for e in run.values()}  # each run's own
    for row, other, gap in ok_pairs(runs):
        records = [row_extra(r, "call_pace") for r in (row, other)]
        if not any(records):
            continue
        fast = [(r or {}).get("fast_speedup") for r in records]
        if all(isinstance(f, (int, float)) and f > 0 for f in fast):
            groups["every_call"].append(gap)
            groups["fast_calls"].append(round(abs(fast[1] - fast[0]) / fast[0], 6))
            # both evaluations' fast level at their run's floor: each saw the host's own fast level, not
            # only the faster of two slow ones (an evaluation timed wholly in a slow spell of its core)
            if all(_at_floor(r, floor_of[id(e)]) for r, e in zip(records, (row, other))):
                groups["floor_every_call"].append(gap)
                groups["floor_fast_calls"].append(groups["fast_calls"][-1])
        # Whether the row's calls follow the host's pace: a side's slow calls PACED slower than its fast
        # ones in either run; device-bound where every ratio read is below; one level where none was read
        ratios = [v for r in records for v in ((r or {}).get("level_ratio") or ()) if isinstance(v, (int, float))]
        groups["one_level" if not ratios else "follows_host" if max(ratios) >= PACED else "device_bound"].append(gap)
        decided = [decided_speedup(r, e.speedup or 0.0) for r, e in zip(records, (row, other))]
        reasons.update(why for _, why in decided)
        groups["decided_every_call"].append(gap)
        groups["decided"].append(round(abs(decided[1][0] - decided[0][0]) / max(decided[0][0], 1e-9), 6))
    return gap_summary(groups) | ({"decided_reasons": dict(reasons)} if reasons else {})


def _floor(run: dict[str, Evaluation]) -> float | None:
    """The lowest fast level (``call_pace.fast_probe_ms``) any evaluation of the run had: the host's own."""
    levels = [(row_extra(r, "call_pace") or {}).get("fast_probe_ms") for r in run.values()]
    return min((v for v in levels if isinstance(v, (int, float)) and v > 0), default=None)


def _at_floor(record: dict[str, Any] | None, floor: float | None) -> bool:
    """Whether an evaluation's fast level is within FAST_SLACK of its run's floor."""
    level = (record or {}).get("fast_probe_ms")
    return floor is not None and isinstance(level, (int, float)) and level <= FAST_SLACK * floor


def pace_follow(run: dict[str, Evaluation]) -> list[dict[str, Any]]:
    """Within each evaluation that recorded its trials' pace readings (``trial_pace_ms`` beside
    ``trial_ms``): how the reference's trial medians and the trials' speedups follow the host's pace (r).

    >>> from cudal1.candidates import Evaluation
    >>> e = Evaluation("r", "c", Status.OK, speedup=2.0, reference_ms=1.0,
    ...                extra={"trial_ms": [[1.0, 0.5], [2.0, 0.5], [1.1, 0.5]], "trial_pace_ms": [0.1, 0.2, 0.11]})
    >>> pace_follow({"r": e})[0]["reference_r"]
    1.0
    """
    out = []
    for pid, row in run.items():
        trials, paces = row_extra(row, "trial_ms"), row_extra(row, "trial_pace_ms")
        if row.status is not Status.OK or not trials or not paces or len(trials) != len(paces):
            continue
        out.append({"problem_id": pid, "reference_ms": round(row.reference_ms or 0.0, 4), "pace_ms": [min(paces), max(paces)],
                    "reference_r": correlation(paces, [t[0] for t in trials], digits=2),
                    "speedup_r": correlation(paces, [t[0] / t[1] for t in trials], digits=2)})
    return out


def by_levels(runs: list[dict[str, Evaluation]], gap: float = 0.15) -> dict[str, Any]:
    """Pooled pairwise agreement of the rows whose trials fall in two levels (``graph_levels.levels``:
    trial medians that split by more than ``gap``) in either run of a pair, by which program's trials
    split, against the rows whose trials hold one level in both: is the disagreement levels mixing within
    an evaluation, or a whole evaluation at another level?

    >>> from cudal1.candidates import Evaluation
    >>> def run(s, ref): return {"r": Evaluation("r", "c", Status.OK, speedup=s, extra={"trial_ms": [[x, 1.0] for x in ref]})}
    >>> by_levels([run(2.0, [2.0, 2.0, 2.1, 2.0]), run(3.0, [3.0, 3.0, 3.0, 3.1])])
    {'neither': {'rows': 1, 'median': 0.5, 'p95': 0.5}}
    >>> list(by_levels([run(2.0, [2.0, 2.0, 3.0, 3.0]), run(2.5, [2.0, 3.0, 2.0, 3.0])]))
    ['reference']
    """
    groups: dict[str, list[float]] = {"neither": [], "reference": [], "candidate": [], "both": []}
    for row, other, moved_by in ok_pairs(runs):
        trials = [row_extra(r, "trial_ms") for r in (row, other)]
        if not all(trials):
            continue
        split = [any(levels([t[side] for t in ts], gap=gap)["split"] for ts in trials) for side in (0, 1)]
        key = "both" if all(split) else "reference" if split[0] else "candidate" if split[1] else "neither"
        groups[key].append(moved_by)
    return gap_summary(groups)


def _spread(rows: list[Evaluation], key: str) -> float:
    values = [getattr(r, key) for r in rows]
    return round(max(values) / min(values) - 1, 4)


def moved(runs: list[dict[str, Evaluation]], threshold: float) -> list[dict[str, Any]]:
    """Rows ok in every run whose speedups spread by more than ``threshold``, with each program's spread."""
    out = []
    for pid in runs[0]:
        rows = [r[pid] for r in runs if pid in r and r[pid].status is Status.OK]
        if len(rows) < len(runs) or _spread(rows, "speedup") <= threshold:
            continue
        out.append({"problem_id": pid, "speedups": [round(r.speedup, 3) for r in rows],  # type: ignore[arg-type]
                    "reference_ms": [round(r.reference_ms, 3) for r in rows],  # type: ignore[arg-type]
                    "speedup_spread": _spread(rows, "speedup"), "reference_spread": _spread(rows, "reference_ms"),
                    "candidate_spread": _spread(rows, "candidate_ms")})
    return sorted(out, key=lambda m: -m["speedup_spread"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path, help="release_eval.py folders (results.jsonl), two or more")
    ap.add_argument("--moved", type=float, default=0.05, help="a row's max/min speedup - 1 above which it is listed")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    if len(args.runs) < 2:
        ap.error("give two runs or more of the same rows")
    runs = [load(r) for r in args.runs]
    changes = verdict_changes(runs)
    report = {"runs": [str(r) for r in args.runs], "verdict_changes": changes, "bands": by_band(runs), "by_pace": by_pace(runs),
              "by_levels": by_levels(runs), "noise_budget": noise_budget(runs),
              "by_call_pace": by_call_pace(runs), "pace_follow": pace_follow(runs[0]), "sittings": sittings(runs), "moved": moved(runs, args.moved)}
    common = len(set.intersection(*(set(r) for r in runs)))
    print(f"verdict changes over {len(runs)} runs: {len(changes)} of {common} rows in every run"
          + "".join(f"; {pid} {' / '.join(st)}" for pid, st in changes.items()))
    for band in report["bands"]:
        lo, hi = band["reference_ms"]
        print(f"reference {lo:g}-{hi:g} ms: {band['rows']:3d} rows, median {band['median']:.2%}, p95 {band['p95']:.2%}")
    for group, g in report["by_pace"].items():
        label = "host pace alike (within 15%)" if group == "same_pace" else "host pace apart"
        print(f"{label}: {g['rows']:3d} rows, "
              f"median {g['median']:.2%}, p95 {g['p95']:.2%}")
    labels = {"every_call": "rows with a fast-pace figure in both, every call",
              "fast_calls": "rows with a fast-pace figure in both, calls at the host's fast pace",
              "floor_every_call": "rows whose fast level was the host's floor in both, every call",
              "floor_fast_calls": "rows whose fast level was the host's floor in both, calls at the host's fast pace",
              "decided_every_call": "rows ok in both, every call", "decided": "rows ok in both, pace.decided_speedup",
              "follows_host": "rows whose calls follow the host's pace, every call",
              "device_bound": "rows whose calls do not follow it, every call",
              "one_level": "rows with one level in every trial, every call"}
    for group, g in report["by_call_pace"].items():
        if group in labels:
            print(f"{labels[group]}: {g['rows']:3d} rows, median {g['median']:.2%}, p95 {g['p95']:.2%}")
    if "decided_reasons" in report["by_call_pace"]:
        print("pace.decided_speedup's reasons:", report["by_call_pace"]["decided_reasons"])
    for group, g in report["by_levels"].items():
        print(f"trials in two levels, {group}: {g['rows']:3d} rows, median {g['median']:.2%}, p95 {g['p95']:.2%}")
    budget = report["noise_budget"]
    if "within" in budget:
        w = budget["within"]
        print(f"within an evaluation ({w['evaluations']}): a trial's ratio spreads {w['trial_ratio_sd']:.2%} (robust sd), "
              f"the reference's {w['reference_sd']:.2%}, the candidate's {w['candidate_sd']:.2%}; the two move "
              f"together at median r = {w['reference_candidate_r']}")
    if "beyond_intervals" in budget:
        z = budget["beyond_intervals"]
        print(f"two runs' gap over their intervals' standard error: median {z['median_z']}, p95 {z['p95_z']} "
              "(0.67 and 1.96 if the intervals told the whole story)")
    print(f"rows timed one after another move together: lag-1 r {budget['order_lag1_r']}; "
          f"with the host's pace: {budget['pace_r']}")
    follow = [f["reference_r"] for f in report["pace_follow"] if f["reference_r"] is not None]
    if follow:
        print(f"first run, {len(follow)} rows with trial pace readings: the reference's trials follow the pace at "
              f"median r = {statistics.median(follow):.2f} ({sum(r >= 0.5 for r in follow)} rows at r >= 0.5)")
    for s in report["sittings"]:
        print(f"{s['sittings']} sitting(s) a side, geometric mean, {s['splits']} splits of the runs: "
              f"median {s['median']:.2%}, p95 {s['p95']:.2%} (up to {s['rows']} rows)")
    for m in report["moved"]:
        print(f"{m['problem_id']:7s} speedups {m['speedups']}  reference moved {m['reference_spread']:.1%}, "
              f"candidate {m['candidate_spread']:.1%}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
