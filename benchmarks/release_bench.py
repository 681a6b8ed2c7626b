"""Turn the GPU runs of a CUDA-L1 release into results files (cudal1/measured.py): result.json, and for the
release pair a per-row rows.csv beside it. Each run is a folder written by benchmarks/release_eval.py
(results.jsonl, summary.json; calls.jsonl where benchmarks/release_run.sh ran it). Runs anywhere with the
standard library and this package (the CPU machine, after the runs come back); one mode a call:

    python benchmarks/release_bench.py --release ../shared/cuda-l1/h100.jsonl --cold RUN/cold --warm RUN/warm \\
        --overhead RUN/overhead.json --evaluate-one RUN/evaluate_one.json --out results/release-h200 \\
        --date 2026-12-04 --commit ee9d6c9 --hardware "1x NVIDIA H200 (16 cores)" --command "what ran"
    python benchmarks/release_bench.py --one-gpu RUN/one --two-gpu RUN/two [--one-gpu RUN/one --two-gpu RUN/two2] \\
        [--build-cache warm] --out results/two-gpu-h200 --date ... --commit ... --hardware ... --command ...
    python benchmarks/release_bench.py --rl RUN/l1/learning.json RUN/l2/learning.json RUN/l3/learning.json \\
        --out results/rl-share-h200 --date ... --commit ... --hardware ... --command ...
    python benchmarks/release_bench.py --regression BEFORE_COLD BEFORE_WARM AFTER_COLD AFTER_WARM \\
        [--repeat BEFORE_WARM2 AFTER_WARM2] --out results/regression-40 --date ... --commit ... --hardware ... --command ...
    python benchmarks/release_bench.py --recipe RUN --out results/learning-h100 --date ... --commit ... \\
        --hardware ... --command ...      # a learning_gpu.py --recipe run; also epochs.csv and curves.png

``--provenance FILE`` takes the date, commit, hardware, command, title and notes from a JSON file kept beside
the runs instead: the reproduction pipeline (reproduction/dvc.yaml) derives results/release-h200 and
results/two-gpu-h200 that way from what the repository keeps.

A run's wall is the sum of its calls in calls.jsonl (release_run.sh records each segment a run ran in),
else its summary.json's, which is refused where it timed a resumed invocation alone.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cudal1.candidates import Evaluation, Status, load_evaluations  # noqa: E402
from cudal1.measured import Figure, Table, git_commit, write_result  # noqa: E402
from cudal1.problems import ProblemLoadError, load_cudal1_release  # noqa: E402
from cudal1.reports import run_agreement, verdict  # noqa: E402

STATUSES = ("ok", "incorrect", "rejected", "compile_error", "runtime_error", "timeout", "harness_failed", "no_program")
# CUDA-L1's per-row scores stay in ../shared (its data is used for evaluation, not redistributed): rows.csv
# holds our measurements only, and the result their means over our rows
ROW_COLUMNS = ["problem", "status", "cold speedup", "warm speedup", "reason"]


def programs_only(results: list[Evaluation]) -> dict[str, Evaluation]:
    """The released programs' evaluations by problem id (baseline rewrites left out), the last one kept."""
    return {e.problem_id: e for e in results if not e.candidate_id.startswith("template")}


def load_run(run: Path) -> dict[str, Evaluation]:
    return programs_only(load_evaluations(run / "results.jsonl"))


def run_summary(run: Path) -> dict[str, Any]:
    """``evaluations``, ``wall_s``, ``calls`` and ``partial`` (stopped by its time limit) of a run folder."""
    calls_path, path = run / "calls.jsonl", run / "summary.json"
    if calls_path.exists():
        calls = [json.loads(line) for line in calls_path.read_text().splitlines() if line.strip()]
        seams = [c["evaluations_before"] for c in calls] != [0] + [c["evaluations_after"] for c in calls[:-1]]
        if seams:  # a segment that ended with its machine wrote no record: its rows count, its wall would not
            raise SystemExit(f"{calls_path}: its segments do not follow one another (a segment's record is "
                             "missing), so their walls do not add up to the run's; measure it again in a new RUN")
        return {"evaluations": calls[-1]["evaluations_after"], "wall_s": round(sum(c["wall_s"] for c in calls), 1),
                "calls": len(calls), "partial": bool(calls[-1].get("stopped_by_limit") or calls[-1].get("exit"))}
    if not path.exists():
        raise SystemExit(f"{run}: neither calls.jsonl nor summary.json: not a finished run of release_eval.py")
    summary = json.loads(path.read_text())
    if summary.get("evaluated_here", summary["evaluations"]) < summary["evaluations"]:
        raise SystemExit(f"{path}: written by a run that resumed this folder ({summary['evaluated_here']} of "
                         f"{summary['evaluations']} evaluations), so its wall_s is that invocation's alone; run "
                         "it with benchmarks/release_run.sh, which records every call's wall")
    return {"evaluations": summary["evaluations"], "wall_s": summary["wall_s"], "calls": 1, "partial": False}


def rate(run: Path) -> float:
    """Evaluations a second over the whole run."""
    summary = run_summary(run)
    return summary["evaluations"] / summary["wall_s"]


def built_here(results: list[Evaluation]) -> list[str]:
    """Rows whose program the run built itself (its prebuild took time and did not fail) rather than
    finding it built: a run said to start on a warm build cache that has any was cold for those rows."""
    return [e.problem_id for e in results
            if (e.extra.get("prebuild_s") or 0.0) > 0.0 and e.status is not Status.COMPILE_ERROR]


def rows_time(results: list[Evaluation]) -> float:
    """The rows' own device time (``extra.row_s``, re-measurements included) summed over a run's devices."""
    return round(sum(e.extra.get("row_s") or 0.0 for e in results), 1)


def host_pace_ratio(run: dict[str, Evaluation], other: dict[str, Evaluation]) -> float | None:
    """Median over the rows ok in both of ``run``'s host pace (``extra.host_pace_ms``: a fixed piece of
    Python work on the timed core) over ``other``'s: under 1 when the host ran faster in ``run``. None
    where the runs do not record it.

    >>> def e(pace):
    ...     return Evaluation("L1-1", "c", Status.OK, speedup=1.0, extra={"host_pace_ms": pace})
    >>> host_pace_ratio({"L1-1": e(0.9)}, {"L1-1": e(1.0)}), host_pace_ratio({}, {})
    (0.9, None)
    """
    ratios = [float(run[k].extra["host_pace_ms"]) / float(other[k].extra["host_pace_ms"])
              for k in run.keys() & other.keys() if run[k].ok and other[k].ok
              and run[k].extra.get("host_pace_ms") and other[k].extra.get("host_pace_ms")]
    return round(statistics.median(ratios), 3) if ratios else None


def _pct(fraction: float | None, digits: int = 2) -> float | None:
    return None if fraction is None else round(100 * fraction, digits)


def _mean(values: list[float]) -> float | None:
    return round(statistics.fmean(values), 2) if values else None


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 2) if values else None


def row_table(release: Path, cold: dict[str, Evaluation], warm: dict[str, Evaluation]) -> list[dict[str, Any]]:
    """Every row of the release: its cold verdict (``no_program`` where the release has none), both runs'
    speedups and the cold run's reason; its ``level`` and CUDA-L1's ``reported`` score for the means."""
    table = []
    for r in load_cudal1_release(release):
        pid = r.problem.problem_id
        e, w = cold.get(pid), warm.get(pid)
        status = "no_program" if r.candidate_source is None else (verdict(e) if e else "not_run")
        table.append({"problem": pid, "level": r.problem.level, "status": status,
                      "cold speedup": None if e is None or e.speedup is None else round(e.speedup, 4),
                      "warm speedup": None if w is None or w.speedup is None else round(w.speedup, 4),
                      "reported": r.reported.get("score_default"), "reason": (e.reason if e else "")[:160]})
    return table


def speedup_figures(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Over the rows ok in the cold run: their speedups' mean and median, and CUDA-L1's mean over them."""
    ok = [t for t in rows if t["status"] == "ok" and t["cold speedup"] is not None]
    reported = [t["reported"] for t in ok if t["reported"] is not None]
    return {"ok_mean_speedup": _mean([t["cold speedup"] for t in ok]),
            "ok_median_speedup": _median([t["cold speedup"] for t in ok]), "reported_mean_speedup": _mean(reported)}


def levels_table(rows: list[dict[str, Any]]) -> Table:
    """Per level, then all levels: rows, programs, ok, the ok rows' mean and median cold speedup, and
    CUDA-L1's reported mean over the same rows."""
    out = []
    for level in [*sorted({t["level"] for t in rows}), "all"]:
        chosen = [t for t in rows if level == "all" or t["level"] == level]
        figures = speedup_figures(chosen)
        out.append([level, len(chosen), sum(t["status"] != "no_program" for t in chosen),
                    sum(t["status"] == "ok" for t in chosen), figures["ok_mean_speedup"],
                    figures["ok_median_speedup"], figures["reported_mean_speedup"]])
    return Table(["level", "rows", "programs", "ok", "mean speedup", "median speedup",
                  "reported mean over the same rows"], out)


def release_result(release: Path, cold_run: Path, warm_run: Path, overhead: Path | None,
                   evaluate_one: Path | None, out: Path) -> tuple[dict[str, Figure], dict[str, Table]]:
    """The release pair's figures and tables; writes ``out/rows.csv``."""
    cold, warm = load_run(cold_run), load_run(warm_run)
    rows = row_table(release, cold, warm)
    out.mkdir(parents=True, exist_ok=True)
    with (out / "rows.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=ROW_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    agree = run_agreement(cold, warm)
    cold_s, warm_s = run_summary(cold_run)["wall_s"], run_summary(warm_run)["wall_s"]
    statuses = Counter(t["status"] for t in rows)
    figures: dict[str, Figure] = {
        "programs": len(cold), "rows": len(rows), "cold_wall_s": cold_s, "warm_wall_s": warm_s,
        "warm_over_cold": round(warm_s / cold_s, 3), "cold_per_program_s": round(cold_s / max(len(cold), 1), 2),
        "warm_per_program_s": round(warm_s / max(len(warm), 1), 2), "agreement_rows": agree["rows"],
        "agreement_median_pct": _pct(agree["median"]), "agreement_p95_pct": _pct(agree["p95"]),
        "verdict_flips": len(agree["flips"]),
        **{s: statuses.get(s, 0) for s in STATUSES if s not in ("timeout", "harness_failed") or statuses.get(s)},
        "harness_overhead_us": json.loads(overhead.read_text())["_summary"]["harness_overhead_us_median"]
        if overhead else None,
        "evaluate_one_s": json.loads(evaluate_one.read_text())["wall_s"] if evaluate_one else None,
        **speedup_figures(rows)}
    known = [s for s in STATUSES if statuses.get(s)] + sorted(set(statuses) - set(STATUSES))
    return figures, {"statuses": Table(["status", "programs"], [[s, statuses[s]] for s in known]),
                     "levels": levels_table(rows)}


def two_gpu_result(ones: list[Path], twos: list[Path], build_cache: str) -> tuple[dict[str, Figure], dict[str, Table]]:
    """One GPU against two of one host on the same rows: the i-th one-GPU run paired with the i-th two-GPU
    run, the speedup the median of the pairs' rate ratios (a pair's ratio moves by a few per cent between
    repeats); the walls those of the median pair. Each pair also gives its rows' device time on two GPUs
    over one GPU's, and the host's pace in the two-GPU run over the one-GPU run's."""
    if len(ones) != len(twos) or not ones:
        raise SystemExit(f"{len(ones)} one-GPU runs against {len(twos)} two-GPU runs: give them in pairs")
    pairs, rows = [], None
    for one, two in zip(ones, twos):
        a, b = load_evaluations(one / "results.jsonl"), load_evaluations(two / "results.jsonl")
        for run, results in ((one, a), (two, b)) if build_cache == "warm" else ():
            if built := built_here(results):
                raise SystemExit(f"{run} built {len(built)} programs itself ({', '.join(built[:5])}), so its build "
                                 "cache was not warm: fill it first (two_gpu.sh WARM=1) or say --build-cache empty")
        ids = sorted(e.problem_id for e in a)
        if ids != sorted(e.problem_id for e in b) or (rows is not None and ids != rows):
            raise SystemExit(f"{one} and {two} measured different rows (or rows other than the first pair's): "
                             "their rates do not compare")
        rows = ids
        work_one, work_two = rows_time(a), rows_time(b)
        pairs.append([one.name, two.name, run_summary(one)["wall_s"], run_summary(two)["wall_s"],
                      round(rate(two) / rate(one), 3), round(work_two / work_one, 3) if work_one else None,
                      host_pace_ratio(programs_only(b), programs_only(a))])
    middle = sorted(pairs, key=lambda p: p[4])[(len(pairs) - 1) // 2]
    figures: dict[str, Figure] = {"programs": len(rows or []), "one_gpu_wall_s": middle[2],
                                  "two_gpu_wall_s": middle[3], "speedup": round(statistics.median(p[4] for p in pairs), 3)}
    columns = ["one-GPU run", "two-GPU run", "one-GPU wall s", "two-GPU wall s", "speedup",
               "rows device s two over one", "host pace two over one"]
    return figures, {"pairs": Table(columns, pairs)}


def rl_result(runs: list[Path]) -> tuple[dict[str, Figure], dict[str, Table]]:
    """Evaluation's share of one contrastive-RL epoch, from benchmarks/learning_gpu.py's last output line,
    one file per run; the figure is the median run's (the upper middle one of an even count)."""
    table = []
    for path in runs:
        epoch = json.loads(path.read_text().strip().splitlines()[-1])["rl_epoch"]
        share = round(100 * epoch["evaluation_s"] / epoch["total_s"], 1)
        table.append([path.parent.name if path.name == "learning.json" else path.stem,
                      round(epoch["evaluation_s"], 3), round(epoch["total_s"], 3), share])
    middle = sorted(row[3] for row in table)[len(table) // 2]
    return ({"rl_eval_share_pct": middle, "runs": len(table)},
            {"runs": Table(["run", "evaluation s", "total s", "share %"], table)})


def regression_result(before_cold: Path, before_warm: Path, after_cold: Path, after_warm: Path,
                      repeats: tuple[Path, Path] | None = None) -> tuple[dict[str, Figure], dict[str, Table]]:
    """The same rows cold then warm on the tree before a change and on this tree: each side's walls,
    per-program time (its runs' walls over their programs) and agreement, and the rows whose verdict is the
    same on both sides in every run. ``repeats`` (a second warm run of each side, BEFORE then AFTER) gives
    each side three pairs (cold-warm, cold-warm2, warm-warm2) where one pair's agreement is a noisy sample:
    a side's agreement figure is then the median over its pairs of each pair's median and p95."""
    runs = {"before cold": before_cold, "before warm": before_warm, "after cold": after_cold, "after warm": after_warm}
    if repeats:
        runs |= {"before warm2": repeats[0], "after warm2": repeats[1]}
    loaded = {name: load_run(path) for name, path in runs.items()}
    walls = {name: run_summary(path)["wall_s"] for name, path in runs.items()}
    rows = sorted(set().union(*(set(r) for r in loaded.values())))
    figures: dict[str, Figure] = {}
    pairs: list[list[Figure]] = []
    for side in ("before", "after"):
        mine = [name for name in runs if name.startswith(side)]
        agreements = []
        for i, first in enumerate(mine):
            for second in mine[i + 1:]:
                agree = run_agreement(loaded[first], loaded[second])
                agreements.append(agree)
                pairs.append([side, f"{first.split()[1]}-{second.split()[1]}", agree["rows"], _pct(agree["median"]),
                              _pct(agree["p95"])])
        figures |= {f"{side}_cold_wall_s": walls[f"{side} cold"], f"{side}_warm_wall_s": walls[f"{side} warm"],
                    f"{side}_per_program_s": round(sum(walls[n] for n in mine)
                                                   / max(sum(len(loaded[n]) for n in mine), 1), 2),
                    f"{side}_agreement_median_pct": _pct(statistics.median(a["median"] for a in agreements)),
                    f"{side}_agreement_p95_pct": _pct(statistics.median(a["p95"] for a in agreements))}

    def verdicts(pid: str) -> list[str]:
        return [verdict(loaded[name][pid]) if pid in loaded[name] else "not_run" for name in runs]

    names = list(runs)
    matched = [(names.index(f"before {run}"), names.index(f"after {run}")) for run in ("cold", "warm", "warm2")
               if f"before {run}" in runs]
    changed = [[pid, *v] for pid in rows for v in [verdicts(pid)] if any(v[b] != v[a] for b, a in matched)]
    figures |= {"verdicts_same": len(rows) - len(changed), "rows": len(rows)}
    table = [[name, walls[name], len(loaded[name]), sum(e.ok for e in loaded[name].values())] for name in runs]
    return figures, {"runs": Table(["run", "wall s", "programs", "ok"], table),
                     "agreement": Table(["side", "runs", "rows ok in both", "median %", "p95 %"], pairs),
                     "verdict_changes": Table(["problem", *runs], changed)}


PROVENANCE = ("title", "date", "commit", "hardware", "command", "notes")  # what --provenance may record


# what an epoch learned (its problems, then the held-out ones), then where its time went; the median beside
# the mean, which one outlier can carry (a degenerate problem's program at 500x among rewrites near 1x)
LEARNED = ("success_rate", "well_formed_rate", "mean_speedup", "median_speedup", "max_speedup", "mean_reward",
           "held_out_success_rate", "held_out_well_formed_rate", "held_out_mean_speedup", "held_out_max_speedup",
           "held_out_mean_reward")
EPOCH_COLUMNS = ("epoch", *LEARNED, "generation_s", "builds_s", "evaluation_s", "training_and_other_s", "held_out_s",
                 "total_s")
SSL_COLUMNS = ("round", "samples", "success_rate", "problems_solved", "new_correct", "pool_correct")


def recipe_result(run_dir: Path, out: Path) -> tuple[dict[str, Figure], dict[str, Table]]:
    """A recipe run of learning_gpu.py (its learning.json): each RL epoch's figures on its problems and on the
    held-out ones and its time split, epoch -1 being the policy before RL (held-out figures only); also
    epochs.csv and curves.png beside result.json. A figure the run lacks stays empty, zeros stay zeros."""
    import math

    from cudal1.reports import plot_series

    run = json.loads((run_dir / "learning.json").read_text())
    rows = [{"epoch": -1, **run.get("held_out_before_rl", {})}] + [r | {"epoch": int(r["epoch"])} for r in run["rl_epochs"]]

    def cell(value: Any) -> Figure:
        return None if value is None or (isinstance(value, float) and math.isnan(value)) else round(value, 4)

    table = [[cell(r.get(c)) for c in EPOCH_COLUMNS] for r in rows]
    out.mkdir(parents=True, exist_ok=True)
    with (out / "epochs.csv").open("w", newline="") as handle:
        csv.writer(handle).writerows([EPOCH_COLUMNS, *table])
    plot_series(rows[1:], "epoch", ["success_rate", "held_out_success_rate", "mean_reward", "held_out_mean_reward"],
                out / "curves.png", "Contrastive RL per epoch: its problems and held-out ones")
    figures = {k: cell(run["rl_epochs"][-1].get(k)) for k in LEARNED} | {
        "epochs": len(run["rl_epochs"]), "problems": len(run["problems"]), "held_out": len(run["held_out"]),
        "held_out_success_rate_before_rl": cell(rows[0].get("held_out_success_rate")),
        "first_epoch_success_rate": cell(run["rl_epochs"][0].get("success_rate")),
        "held_out_best_success_rate": cell(max(r.get("held_out_success_rate", 0.0) for r in rows)),
        "augment_candidates": run["augment"]["candidates"],
        "sft_examples": run["sft"]["examples"], "sft_last_loss": cell(run["sft"].get("last_loss")),
        "corpus_programs": sum(run["augment"]["correct_by_origin"].values()), "rl_s": cell(run.get("rl_seconds"))}
    stages = [[name, cell(run[name].get("seconds")) if isinstance(run.get(name), dict) else None]
              for name in ("augment", "sft")] + [["self_supervised", cell(run.get("self_supervised_seconds"))]]
    rounds = [[cell(r.get(c)) for c in SSL_COLUMNS] for r in run.get("self_supervised", [])]
    return figures, {"epochs": Table(list(EPOCH_COLUMNS), table), "stages": Table(["stage", "seconds"], stages),
                     "self_supervised": Table(list(SSL_COLUMNS), rounds)}


TITLES = {"release": "The CUDA-L1 H100 release re-measured cold then warm", "two_gpu": "One GPU against two",
          "rl": "Evaluation's share of one RL epoch", "regression": "The first release rows before and after a change",
          "recipe": "The recipe on one GPU: contrastive RL per epoch, on its problems and held-out ones"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--release", type=Path, help="the release file the runs measured (the release pair)")
    ap.add_argument("--cold", type=Path, help="the run on an empty build cache")
    ap.add_argument("--warm", type=Path, help="the same rows again, on the warm build cache")
    ap.add_argument("--overhead", type=Path, help="benchmarks/timing_overhead.py --json output")
    ap.add_argument("--evaluate-one", type=Path, help='{"wall_s": ...} of one `cudal1 evaluate-one` call')
    ap.add_argument("--one-gpu", type=Path, action="append", default=[], help="a run on one GPU (repeatable)")
    ap.add_argument("--two-gpu", type=Path, action="append", default=[], help="the same rows on two GPUs")
    ap.add_argument("--build-cache", choices=("empty", "warm"), default="empty",
                    help="how the one-GPU and two-GPU runs started (warm: each must have built nothing itself)")
    ap.add_argument("--rl", type=Path, nargs="+", help="learning_gpu.py outputs (their last line), one a run")
    ap.add_argument("--regression", type=Path, nargs=4, metavar=("BEFORE_COLD", "BEFORE_WARM", "AFTER_COLD", "AFTER_WARM"))
    ap.add_argument("--repeat", type=Path, nargs=2, metavar=("BEFORE_WARM2", "AFTER_WARM2"),
                    help="with --regression: a second warm run of each side, for three agreement pairs a side")
    ap.add_argument("--recipe", type=Path, help="a learning_gpu.py --recipe run's folder (its learning.json)")
    ap.add_argument("--out", type=Path, required=True, help="the results folder, e.g. results/release-h200")
    ap.add_argument("--provenance", type=Path, help="a JSON file recording the runs' title, date, commit, hardware, "
                    "command and notes (kept beside them); the options below override it")
    ap.add_argument("--title", help="what was measured (default: by mode)")
    ap.add_argument("--date", help="when the runs were made (default today)")
    ap.add_argument("--commit", help="the tree that ran them (default this checkout's)")
    ap.add_argument("--hardware", help='e.g. "1x NVIDIA H200 (16 cores)"')
    ap.add_argument("--command", help="the command that made the runs, recorded as is")
    ap.add_argument("--notes")
    args = ap.parse_args(argv)
    recorded = json.loads(args.provenance.read_text()) if args.provenance else {}
    for key in PROVENANCE:
        if getattr(args, key) is None:
            setattr(args, key, recorded.get(key))
    missing = [f"--{key}" for key in ("hardware", "command") if not getattr(args, key)]
    if missing:
        ap.error(f"{' and '.join(missing)} (or --provenance with them): what ran the runs, and on what")
    modes = [m for m, given in (("release", args.cold or args.warm), ("two_gpu", args.one_gpu or args.two_gpu),
                                ("rl", args.rl), ("regression", args.regression), ("recipe", args.recipe)) if given]
    if len(modes) != 1:
        ap.error("one mode a call: --cold with --warm, --one-gpu with --two-gpu, --rl, --regression or --recipe")
    args.mode = modes[0]
    if args.mode == "release" and not (args.release and args.cold and args.warm):
        ap.error("the release pair needs --release, --cold and --warm")
    return args


def main(argv: list[str] | None = None) -> Path:
    args = parse_args(argv)
    if args.mode == "release":
        try:
            figures, tables = release_result(args.release, args.cold, args.warm, args.overhead, args.evaluate_one,
                                             args.out)
        except ProblemLoadError as exc:  # a release file that is missing, or not the declared one
            raise SystemExit(f"error: {exc}") from exc
    elif args.mode == "two_gpu":
        figures, tables = two_gpu_result(args.one_gpu, args.two_gpu, args.build_cache)
    elif args.mode == "rl":
        figures, tables = rl_result(args.rl)
    elif args.mode == "recipe":
        figures, tables = recipe_result(args.recipe, args.out)
    else:
        figures, tables = regression_result(*args.regression, repeats=args.repeat)
    path = write_result(args.out, title=args.title or TITLES[args.mode], command=args.command, hardware=args.hardware,
                        figures=figures, tables=tables, notes=args.notes or "", date=args.date,
                        commit=args.commit or git_commit())
    print(json.dumps(figures))
    return path


if __name__ == "__main__":
    main()
