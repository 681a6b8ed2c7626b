"""Replays other stopping rules for the timed trials on runs already made, and says what each would have
cost and how well the runs would have agreed.

Every evaluation records its trials' median per-call times (``extra.trial_ms``, in the order timed), all
its speedup, interval and stopping rule come from. A rule here is (least trials, most trials, interval
target): trials are taken in the recorded order until at least the least are in and the 95% interval of
the median speedup lies within the target of it, or the most are in. Rules can only stop earlier than the
runs did (a rule's ceiling above a run's is cut at the trials recorded). Runs are folders written by
benchmarks/release_eval.py; every pair of them is compared, the rows ok in both:

    python benchmarks/stopping_rules.py RUN/a RUN/b [RUN/c ...] [--rules 5:15:0.02,5:8:0.02,5:5:0] [--json out.json]

Cost is the timing phase each row would have spent: its own seconds per trial (timing_s / trials) times
the trials the rule takes. Rows re-measured above 3× are replayed on the measurement that was kept. Then,
per run, what its timed batches alone came to (:func:`timed_floor`), and the device's own work under the
protocol with them (:func:`device_floor`): less than any run of those rows can take on one GPU.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from release_bench import agreement  # noqa: E402  the published figures' own definition of agreement

from cudal1.candidates import Evaluation, Status, load_evaluations  # noqa: E402
from cudal1.evaluator.timing import Measurement, TrialPair  # noqa: E402

Rule = tuple[int, int, float]


def parse_rules(text: str) -> list[Rule]:
    """``least:most:target`` items, comma-separated.

    >>> parse_rules("5:15:0.02,5:5:0")
    [(5, 15, 0.02), (5, 5, 0.0)]
    """
    rules = []
    for item in text.split(","):
        least, most, target = item.split(":")
        rules.append((int(least), int(most), float(target)))
    return rules


def replay(trial_ms: list[list[float]], rule: Rule) -> tuple[float, int]:
    """The speedup a rule reports on these trials, and how many trials it takes.

    >>> replay([[2.0, 1.0]] * 5 + [[4.0, 1.0]] * 10, (5, 15, 0.02))  # five equal trials: stop at five
    (2.0, 5)
    >>> replay([[2.0, 1.0], [3.0, 1.0], [2.0, 1.0], [3.0, 1.0], [2.0, 1.0], [9.0, 1.0]], (5, 8, 0.02))
    (2.5, 6)
    """
    least, most, target = rule
    pairs = [TrialPair([r], [c], 0.0, 0.0) for r, c in trial_ms]
    n = min(least, len(pairs))
    while True:
        m = Measurement.from_pairs(pairs[:n])
        if n >= min(most, len(pairs)) or m.half_width <= target:
            return m.speedup, n
        n += 1


def load_run(run: Path) -> dict[str, dict[str, Any]]:
    """Rows ok with recorded trials, by problem id: their trials, seconds a trial, whether re-measured."""
    rows = {}
    for line in (run / "results.jsonl").read_text().splitlines():
        r = json.loads(line)
        extra = json.loads(r["extra"]) if isinstance(r.get("extra"), str) else (r.get("extra") or {})
        if r["status"] != "ok" or not extra.get("trial_ms") or r["candidate_id"].startswith("template"):
            continue
        rows[r["problem_id"]] = {"trial_ms": extra["trial_ms"], "rechecked": "recheck_speedup" in extra,
                                 "trial_s": extra.get("timing_s", 0.0) / max(len(extra["trial_ms"]), 1)}
    return rows


def timed_floor(evaluations: list[Evaluation], target_ms: float, least: int) -> dict[str, Any]:
    """What a run's timed batches alone come to: every timed trial (a re-checked row's measurements all
    counted, ``extra.recheck_trials``) at two batches of ``target_ms``, and the same at ``least`` trials a
    timed row, a floor under any stopping rule that keeps the minimum.

    >>> rows = [Evaluation("a", "c", Status.OK, trials=15), Evaluation("b", "c", Status.OK, trials=5,
    ...         extra={"recheck_trials": [15, 5]}), Evaluation("c", "c", Status.INCORRECT)]
    >>> timed_floor(rows, 40.0, 5)
    {'rows_timed': 2, 'trials': 35, 'at_ceiling': 2, 'timed_batches_s': 2.8, 'at_least_s': 0.8}
    """
    measured = [e.extra.get("recheck_trials") or [e.trials] for e in evaluations if e.trials]
    ceiling = max((max(m) for m in measured), default=0)
    trials = sum(sum(m) for m in measured)
    return {"rows_timed": len(measured), "trials": trials, "at_ceiling": sum(max(m) == ceiling for m in measured),
            "timed_batches_s": round(trials * 2 * target_ms / 1e3, 1),
            "at_least_s": round(len(measured) * least * 2 * target_ms / 1e3, 1)}


def device_floor(floor: dict[str, Any], split: dict[str, float]) -> dict[str, float]:
    """The device's own work in a run under the protocol. Two parts need the device to themselves: the
    timed batches (:func:`timed_floor`) and the self-tuning programs' first calls, made alone so that no
    neighbour's kernels steer their choices (``EvalConfig.tune_alone``); ``alone_s`` is their sum. The
    kept evaluations' correctness trials, which the device loop runs one row at a time, make ``floor_s``
    (seconds from ``time_split_s`` of the run's summary.json). Loads, builds, waits and the re-measurements'
    own checks come on top, so a run takes longer. ``*_at_least_s``: the same with every timed row at the
    minimum trials.

    >>> device_floor({"timed_batches_s": 179.1, "at_least_s": 66.4},
    ...              {"tuned_first_call_s": 69.1, "correctness_s": 45.9, "timing_s": 193.5})
    {'first_calls_alone_s': 69.1, 'correctness_s': 45.9, 'alone_s': 248.2, 'floor_s': 294.1, 'alone_at_least_s': 135.5, 'floor_at_least_s': 181.4}
    """
    first = float(split.get("tuned_first_call_s", 0.0))
    checks = float(split.get("correctness_s", 0.0))
    found = {"first_calls_alone_s": first, "correctness_s": checks}
    for suffix, timed in (("", floor["timed_batches_s"]), ("_at_least", floor["at_least_s"])):
        found[f"alone{suffix}_s"] = round(timed + first, 1)
        found[f"floor{suffix}_s"] = round(timed + first + checks, 1)
    return found


def evaluate(runs: dict[str, dict[str, dict[str, Any]]], rule: Rule) -> dict[str, Any]:
    """One rule over every run: trials and timing seconds per run, agreement of every pair of runs."""
    replayed = {name: {pid: replay(row["trial_ms"], rule) for pid, row in rows.items()} for name, rows in runs.items()}
    cost = {name: sum(n * runs[name][pid]["trial_s"] for pid, (_, n) in rows.items()) for name, rows in replayed.items()}
    trials = {name: sum(n for _, n in rows.values()) for name, rows in replayed.items()}
    figures = {name: {pid: Evaluation(pid, "replayed", Status.OK, speedup=s) for pid, (s, _) in rows.items()}
               for name, rows in replayed.items()}
    pairs = {}
    for a, b in itertools.combinations(runs, 2):
        found = agreement(figures[a], figures[b])
        if found["rows"]:
            pairs[f"{a}~{b}"] = {"median": found["median"], "p95": found["p95"], "rows": found["rows"]}
    medians = [v["median"] for v in pairs.values()]
    p95s = [v["p95"] for v in pairs.values()]
    return {"rule": list(rule), "trials": trials, "timing_s": {k: round(v, 1) for k, v in cost.items()},
            "agreement_median_mean": round(statistics.mean(medians), 4) if medians else None,
            "agreement_p95_mean": round(statistics.mean(p95s), 4) if p95s else None, "pairs": pairs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--rules", default="5:15:0.02,5:12:0.02,5:10:0.02,5:8:0.02,5:15:0.03,5:10:0.03,5:15:0.05,5:5:0")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    runs = {str(run): load_run(run) for run in args.runs}
    results = [evaluate(runs, rule) for rule in parse_rules(args.rules)]
    print(f"{'rule':>14} {'trials':>8} {'timing s':>9} {'agree med':>9} {'agree p95':>9}")
    for r in results:
        least, most, target = r["rule"]
        print(f"{least:>3}:{most:>2}:{target:<6} {sum(r['trials'].values()):>8} {sum(r['timing_s'].values()):>9.1f} "
              f"{r['agreement_median_mean']:>9.4f} {r['agreement_p95_mean']:>9.4f}")
    for run in args.runs:  # what the timed batches alone came to, per run
        summary = run / "summary.json"
        found = json.loads(summary.read_text()) if summary.exists() else {}
        config = found.get("config", {})
        floor = timed_floor(load_evaluations(run / "results.jsonl"), float(config.get("target_trial_ms", 40.0)),
                            int(config.get("timing_trials", 5)))
        print(f"{run}: {floor['rows_timed']} rows timed, {floor['trials']} trials ({floor['at_ceiling']} rows at "
              f"the ceiling): {floor['timed_batches_s']} s of timed batches; {floor['at_least_s']} s at the minimum")
        if found.get("time_split_s"):
            device = device_floor(floor, found["time_split_s"])
            print(f"{run}: device to itself {device['alone_s']} s (timed batches, first calls alone "
                  f"{device['first_calls_alone_s']} s), with correctness {device['floor_s']} s "
                  f"(+{device['correctness_s']} s); at the minimum {device['alone_at_least_s']} s and "
                  f"{device['floor_at_least_s']} s; the run's wall {found.get('wall_s')} s")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
