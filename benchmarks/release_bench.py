"""The evaluator's speed and repeatability on a CUDA-L1 release, as one JSON file and one per-row table.

Reads what the GPU runs left (each a folder written by benchmarks/release_eval.py: results.jsonl and
summary.json; the JSON of benchmarks/timing_overhead.py; the timing of `cudal1 evaluate-one`; the last
line of benchmarks/learning_gpu.py) and writes the figures of docs/benchmarks/release-h100.json. Runs
anywhere with the standard library and this package (the CPU machine, after the GPU runs come back):

    python benchmarks/release_bench.py --release ../shared/cuda-l1/h100.jsonl \
        --cold RUN/cold --warm RUN/warm [--one-gpu RUN/x2-one --two-gpu RUN/x2-two] \
        [--overhead RUN/overhead.json] [--evaluate-one RUN/evaluate_one.json] [--rl RUN/learning.json] \
        --command "the command that made the runs" \
        --json docs/benchmarks/release-h100.json --table docs/benchmarks/release-h100-rows.csv

A two-GPU measurement made apart from the cold and warm runs (one GPU against both of a two-GPU
machine, the same rows), and an RL epoch's share, go into an existing JSON with ``--update``, the rest
of it kept, each with its own date and command (``details.two_gpu``, ``details.rl``):

    python benchmarks/release_bench.py --update --one-gpu RUN/one --two-gpu RUN/two \
        [--one-gpu RUN/one-again --two-gpu RUN/two-again ...] [--rl RUN/learning.json] \
        --command "the command that made these runs" --json docs/benchmarks/release-h100.json

Repeated pairs give the median of their ratios, each pair listed in ``details.two_gpu.pairs``.

The per-row table has every row of the release (250): rows whose release carries no program have status
``no_program``; it holds our measurements only (the release's reported scores stay in ../shared).
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cudal1.candidates import Evaluation, Status, load_evaluations  # noqa: E402
from cudal1.problems import load_cudal1_release  # noqa: E402


def programs_only(results: list[Evaluation]) -> dict[str, Evaluation]:
    """The released programs' evaluations by problem id (baseline rewrites left out), last one kept."""
    return {e.problem_id: e for e in results if not e.candidate_id.startswith("template")}


def verdict(e: Evaluation) -> str:
    return "harness_failed" if e.harness_failed else e.status.value


def agreement(first: dict[str, Evaluation], second: dict[str, Evaluation]) -> dict[str, Any]:
    """|Δ speedup| / speedup over the rows measured ok in both runs, and the rows whose verdict changed
    (a harness failure in either run is no verdict and is left out). Where both carry a 95% interval:
    ``inside``, the share of rows whose second figure lies in the first's interval, and ``overlap``, the
    share whose two intervals overlap (how well one run's interval speaks for another run).

    >>> from cudal1.candidates import Status
    >>> a = {"r1": Evaluation("r1", "c", Status.OK, speedup=2.0), "r2": Evaluation("r2", "c", Status.OK, speedup=1.0)}
    >>> b = {"r1": Evaluation("r1", "c", Status.OK, speedup=2.02), "r2": Evaluation("r2", "c", Status.REJECTED)}
    >>> agreement(a, b)["flips"], round(agreement(a, b)["median"], 4), agreement(a, b)["inside"]
    (['r2'], 0.01, None)
    >>> a["r1"] = Evaluation("r1", "c", Status.OK, speedup=2.0, speedup_low=1.95, speedup_high=2.01)
    >>> b["r1"] = Evaluation("r1", "c", Status.OK, speedup=2.02, speedup_low=2.0, speedup_high=2.05)
    >>> agreement(a, b)["inside"], agreement(a, b)["overlap"]
    (0.0, 1.0)

    ``edge_flips``: the flips whose passing side was flagged ``tolerance_edge`` (it passed near its
    tolerance, so another draw of inputs could fail it: the program's verdict, not the harness's).

    >>> a["r2"] = Evaluation("r2", "c", Status.OK, speedup=1.0, flags=("tolerance_edge",))
    >>> agreement(a, b)["edge_flips"]
    ['r2']
    """
    from cudal1.candidates import Status

    def ok(e: Evaluation) -> bool:
        return Status(e.status) is Status.OK and e.speedup is not None

    common = sorted(set(first) & set(second))
    pairs = [(first[k], second[k]) for k in common if ok(first[k]) and ok(second[k])]
    gaps = sorted(abs(b.speedup - a.speedup) / a.speedup for a, b in pairs)  # type: ignore[operator]
    flips = [k for k in common if "harness_failed" not in (verdict(first[k]), verdict(second[k]))
             and Status(first[k].status) is not Status(second[k].status)]
    edge = [k for k in flips if "tolerance_edge" in (*first[k].flags, *second[k].flags)]
    if not gaps:
        return {"rows": 0, "median": None, "p95": None, "flips": flips, "edge_flips": edge, "inside": None,
                "overlap": None}
    spans = [(a, b) for a, b in pairs if None not in (a.speedup_low, a.speedup_high, b.speedup_low, b.speedup_high)]
    inside = [a.speedup_low <= b.speedup <= a.speedup_high for a, b in spans]  # type: ignore[operator]
    overlap = [a.speedup_low <= b.speedup_high and b.speedup_low <= a.speedup_high for a, b in spans]  # type: ignore[operator]
    return {"rows": len(gaps), "median": statistics.median(gaps),
            "p95": gaps[min(len(gaps) - 1, round(0.95 * (len(gaps) - 1)))], "max": gaps[-1], "flips": flips,
            "edge_flips": edge,
            "inside": sum(inside) / len(spans) if spans else None,
            "overlap": sum(overlap) / len(spans) if spans else None}


def run_summary(run: Path) -> dict[str, Any]:
    """release_eval.py's summary. A run made in several calls (benchmarks/release_resume.sh, each call
    resuming the last) has its calls in ``calls.jsonl``: its wall is their sum, the time a call spent
    on a row it did not finish included. A run stopped by its time limit (no summary written): the last
    progress line of its log (``[n/N  t s] ...``), n evaluations in t seconds, marked partial."""
    calls_path, path = run / "calls.jsonl", run / "summary.json"
    if calls_path.exists():
        calls = [json.loads(line) for line in calls_path.read_text().splitlines() if line.strip()]
        return {"evaluations": calls[-1]["evaluations_after"], "wall_s": sum(c["wall_s"] for c in calls),
                "calls": len(calls), "partial": bool(calls[-1].get("stopped_by_limit"))}
    if path.exists():
        summary = json.loads(path.read_text())
        if summary.get("evaluated_here", summary["evaluations"]) < summary["evaluations"]:
            raise SystemExit(f"{path}: written by a run that resumed this folder ({summary['evaluated_here']} of "
                             f"{summary['evaluations']} evaluations), so its wall_s is that invocation's alone; run "
                             "a measured run in a new folder, or across calls with benchmarks/release_resume.sh")
        return summary
    log = run.with_name(run.name + ".log")
    lines = [line for line in log.read_text().splitlines() if line.startswith("[")]
    if not lines:
        raise SystemExit(f"{run}: no summary.json and no progress lines in {log}")
    done, rest = lines[-1][1:].split("/", 1)
    seconds = float(rest.split("]")[0].split()[-1].rstrip("s"))
    return {"evaluations": int(done), "wall_s": seconds, "partial": True}


def rate(run: Path) -> float:
    """Evaluations a second over the whole run."""
    summary = run_summary(run)
    return summary["evaluations"] / summary["wall_s"]


def row_table(release: Path, cold: dict[str, Evaluation], warm: dict[str, Evaluation]) -> list[dict[str, Any]]:
    table = []
    for r in load_cudal1_release(release):
        pid = r.problem.problem_id
        e, w = cold.get(pid), warm.get(pid)
        status = "no_program" if r.candidate_source is None else (verdict(e) if e else "not_run")
        table.append({
            "problem_id": pid, "status": status,
            "speedup_vs_eager": e.speedup if e else None,
            "speedup_low": e.speedup_low if e else None, "speedup_high": e.speedup_high if e else None,
            "warm_status": verdict(w) if w else "", "warm_speedup_vs_eager": w.speedup if w else None,
            "trials": e.trials if e else None, "eval_s": round(e.eval_s, 2) if e and e.eval_s else None,
            "flags": ",".join(e.flags) if e else "", "reason": (e.reason if e else "")[:160],
            "device": e.device_name if e else "",
        })
    return table


def keep_earlier(figures: dict[str, Any], earlier: dict[str, Any]) -> None:
    """Figures this run did not measure, taken from an earlier JSON of this script with the date they
    were measured: the earlier JSON's own date, or the date it had kept them from.

    >>> figures = {"harness_overhead_us_median": 69.0, "evaluate_one_wall_s": None, "rl_eval_share": None,
    ...            "details": {}}
    >>> keep_earlier(figures, {"date": "2026-11-25", "evaluate_one_wall_s": 7.54, "rl_eval_share": 0.101,
    ...                        "details": {"kept_from": {"evaluate_one_wall_s": "2026-11-24"}}})
    >>> figures["evaluate_one_wall_s"], figures["details"]["kept_from"]
    (7.54, {'evaluate_one_wall_s': '2026-11-24', 'rl_eval_share': '2026-11-25'})

    A figure that an ``--update`` recorded with its own date and command (``details.two_gpu``,
    ``details.rl``) is kept with that record, not dated by the earlier JSON:

    >>> figures = {"harness_overhead_us_median": 69.0, "evaluate_one_wall_s": 6.0, "rl_eval_share": None,
    ...            "two_gpu_speedup": None, "details": {}}
    >>> keep_earlier(figures, {"date": "2026-11-29", "rl_eval_share": 0.145, "details": {"rl": {"date": "2026-11-28"}}})
    >>> figures["rl_eval_share"], figures["details"]
    (0.145, {'rl': {'date': '2026-11-28'}})
    """
    details = earlier.get("details") or {}
    kept = details.get("kept_from") or {}
    # with their own date and command (update_two_gpu, update_rl)
    for key, record in (("two_gpu_speedup", "two_gpu"), ("rl_eval_share", "rl")):
        if figures.get(key) is None and details.get(record) and earlier.get(key) is not None:
            figures[key] = earlier[key]
            figures["details"][record] = details[record]
    for key in ("harness_overhead_us_median", "evaluate_one_wall_s", "rl_eval_share"):
        if figures[key] is None and earlier.get(key) is not None:
            figures[key] = earlier[key]
            figures["details"].setdefault("kept_from", {})[key] = kept.get(key) or earlier.get("date")


def built_here(results: list[Evaluation]) -> list[str]:
    """Rows whose program a run built itself (its prebuild ran, and did not fail, rather than finding the
    program built): a run said to start on a warm build cache that has any was cold for those rows. A
    new run folder of release_resume.sh empties the cache unless told not to (COLD=0), and a two-GPU run
    meant to be warm ran cold that way (docs/gpu-runs.md#2026-11-27-twin-folders)."""
    return [e.problem_id for e in results
            if (e.extra.get("prebuild_s") or 0.0) > 0.0 and e.status is not Status.COMPILE_ERROR]


def rows_time(results: list[Evaluation]) -> float:
    """The rows' own time (``extra.row_s``: the device loop's whole time on a candidate, re-measurements
    included) summed over a run's devices, in seconds."""
    return round(sum(e.extra.get("row_s") or 0.0 for e in results), 1)


def update_two_gpu(figures: dict[str, Any], ones: list[Path], twos: list[Path], command: str, date: str,
                   build_cache: str = "empty") -> dict[str, Any]:
    """``figures`` with two_gpu_speedup from one-GPU and two-GPU runs of the same rows on one machine, and
    where it came from in ``details.two_gpu`` (its own GPU, date, command and rows, and whether both runs
    started with an empty build cache or a warm one: a cold run's builds are CPU work that more GPUs do not
    share out). Several pairs (the i-th one-GPU run with the i-th two-GPU run) give the median of their
    ratios, every pair listed: one pair's ratio moves by a few per cent between repeats on the same host, and
    with the host's pace (``host_pace_two_over_one``: under 1 when the host ran faster in the two-GPU run)."""
    from benchmarks.pool_phases import paired

    if len(ones) != len(twos) or not ones:
        raise SystemExit(f"{len(ones)} one-GPU runs against {len(twos)} two-GPU runs: give them in pairs")
    pairs, rows, gpu = [], None, ""
    for one, two in zip(ones, twos):
        one_run, two_run = run_summary(one), run_summary(two)
        a, b = load_evaluations(one / "results.jsonl"), load_evaluations(two / "results.jsonl")
        for run, results in ((one, a), (two, b)) if build_cache == "warm" else ():
            if built := built_here(results):
                raise SystemExit(f"{run} built {len(built)} programs itself ({', '.join(built[:5])}), so its build "
                                 "cache was not warm: run it on a filled cache (build_floor.py --into-cache, then "
                                 "release_resume.sh with COLD=0) or record it with --build-cache empty")
        ids = sorted(e.problem_id for e in a)
        if ids != sorted(e.problem_id for e in b) or (rows is not None and ids != rows):
            raise SystemExit(f"{one} and {two} measured different rows (or rows other than the first pair's): "
                             "their rates do not compare")
        rows, gpu = ids, gpu or next((e.device_name for e in b if e.device_name), "")
        # The rows' own device time (row_s) summed over the devices: where a ratio under 2x comes from when
        # the devices are balanced (on the whole release, 8-10% more on two GPUs, #2026-11-27-two-gpu-release)
        work_one, work_two = rows_time(a), rows_time(b)
        # The host's own pace on the timed core in the two-GPU run over the one-GPU run's (median over the rows
        # ok in both; None for runs from before it was recorded): it moves between runs of one host by up to
        # 15%, which the ratio follows (#2026-11-29-two-gpu-release), so it is recorded beside each pair.
        pace = paired(b, a)["ratios"]["host_pace_ms"]
        pairs.append({"one_gpu": str(one), "two_gpu": str(two), "one_gpu_wall_s": one_run["wall_s"],
                      "two_gpu_wall_s": two_run["wall_s"], "speedup": round(rate(two) / rate(one), 3),
                      "one_gpu_rows_s": work_one, "two_gpu_rows_s": work_two,
                      "rows_s_two_over_one": round(work_two / work_one, 3) if work_one else None,
                      "host_pace_two_over_one": pace})
    figures["two_gpu_speedup"] = round(statistics.median(p["speedup"] for p in pairs), 3)
    middle = sorted(pairs, key=lambda p: p["speedup"])[(len(pairs) - 1) // 2]
    figures.setdefault("details", {})["two_gpu"] = {
        "gpu": gpu, "date": date, "command": command, "programs": len(rows or []),
        "one_gpu_wall_s": middle["one_gpu_wall_s"], "two_gpu_wall_s": middle["two_gpu_wall_s"],
        # a single pair's rows' time too: whether two devices spend more on the same rows is half the answer
        "rows_s_two_over_one": middle["rows_s_two_over_one"],
        "host_pace_two_over_one": middle["host_pace_two_over_one"],
        "build_cache": build_cache, **({"pairs": pairs} if len(pairs) > 1 else {})}
    return figures


def learning_report(learning: Path) -> dict[str, Any]:
    """benchmarks/learning_gpu.py's report: the last line of its output (its log before it)."""
    return json.loads(learning.read_text().strip().splitlines()[-1])


def eval_share(epoch: dict[str, Any]) -> float:
    """Evaluation's share of one contrastive-RL epoch (``rl_epoch`` of :func:`learning_report`).

    >>> eval_share({"evaluation_s": 1.825, "total_s": 12.553})
    0.145
    """
    return round(epoch["evaluation_s"] / epoch["total_s"], 3)


def update_rl(figures: dict[str, Any], learning: Path, command: str, date: str) -> dict[str, Any]:
    """``figures`` with rl_eval_share from the last JSON line of benchmarks/learning_gpu.py (evaluation's
    share of one contrastive-RL epoch), where it came from in ``details.rl`` (its own GPU, date and command:
    it is measured apart from the release runs, often on another machine).

    >>> import tempfile
    >>> line = {"device": "NVIDIA H200", "rl_epoch": {"evaluation_s": 1.8, "total_s": 12.0, "evaluated": 18.0}}
    >>> with tempfile.TemporaryDirectory() as d:
    ...     (Path(d) / "learning.json").write_text(json.dumps(line))
    ...     figures = update_rl({"details": {"kept_from": {"rl_eval_share": "2026-11-25"}}},
    ...                         Path(d) / "learning.json", "cmd", "2026-11-29")
    96
    >>> figures["rl_eval_share"], figures["details"]["rl"]["evaluated"], figures["details"]["kept_from"]
    (0.15, 18, {})
    """
    report = learning_report(learning)
    epoch = report["rl_epoch"]
    figures["rl_eval_share"] = eval_share(epoch)
    details = figures.setdefault("details", {})
    details.get("kept_from", {}).pop("rl_eval_share", None)  # measured now, not kept from an earlier JSON
    details["rl"] = {"gpu": report.get("device", ""), "date": date, "command": command,
                     "evaluation_s": round(epoch["evaluation_s"], 3), "total_s": round(epoch["total_s"], 3),
                     "evaluated": int(epoch.get("evaluated", 0))}
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--release", type=Path, help="the release file (not needed with --update)")
    ap.add_argument("--cold", type=Path, help="release_eval.py output of the empty-cache run")
    ap.add_argument("--warm", type=Path, help="the same rows again, warm build cache")
    ap.add_argument("--update", action="store_true",
                    help="only two_gpu_speedup (--one-gpu, --two-gpu) and/or rl_eval_share (--rl), into the existing --json")
    ap.add_argument("--one-gpu", type=Path, action="append", default=[],
                    help="a run on one GPU of the two-GPU machine (repeat, with --two-gpu, for repeated pairs)")
    ap.add_argument("--two-gpu", type=Path, action="append", default=[],
                    help="the same rows on both GPUs of that machine")
    ap.add_argument("--build-cache", choices=("empty", "warm"), default="empty",
                    help="how both runs of --one-gpu and --two-gpu started (recorded with the figure)")
    ap.add_argument("--overhead", type=Path, help="benchmarks/timing_overhead.py --json output")
    ap.add_argument("--overhead-key", default="harness_overhead_us_median",
                    help="which of its summary's medians is the figure (another variant of the loop it measured)")
    ap.add_argument("--evaluate-one", type=Path, help='{"wall_s": ...} of one `cudal1 evaluate-one` call')
    ap.add_argument("--rl", type=Path, help="benchmarks/learning_gpu.py's last JSON line")
    ap.add_argument("--command", required=True, help="the command that made the runs, recorded as is")
    ap.add_argument("--date", default=dt.date.today().isoformat())
    ap.add_argument("--keep-from", type=Path, help="an earlier JSON of this script: its evaluate_one_wall_s "
                    "and rl_eval_share are kept (with their date) where this run did not measure them")
    ap.add_argument("--json", required=True, type=Path)
    ap.add_argument("--table", type=Path)
    args = ap.parse_args()
    if args.update:
        if not ((args.one_gpu and args.two_gpu) or args.rl) or not args.json.exists():
            ap.error("--update needs an existing --json, and --one-gpu with --two-gpu, or --rl, or both")
        figures = json.loads(args.json.read_text())
        if args.one_gpu or args.two_gpu:
            update_two_gpu(figures, args.one_gpu, args.two_gpu, args.command, args.date, args.build_cache)
        if args.rl:
            update_rl(figures, args.rl, args.command, args.date)
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
        print(json.dumps({k: figures["details"][k] for k in ("two_gpu", "rl") if k in figures["details"]}))
        return
    if not (args.release and args.cold and args.warm and args.table):
        ap.error("--release, --cold, --warm and --table are needed (or --update)")

    cold, warm = programs_only(load_evaluations(args.cold / "results.jsonl")), \
        programs_only(load_evaluations(args.warm / "results.jsonl"))
    table = row_table(args.release, cold, warm)
    args.table.parent.mkdir(parents=True, exist_ok=True)
    with args.table.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(table[0]))
        writer.writeheader()
        writer.writerows(table)
    agree = agreement(cold, warm)
    gpu = next((e.device_name for e in cold.values() if e.device_name), "")
    cold_run, warm_run = run_summary(args.cold), run_summary(args.warm)
    cold_s, warm_s = float(cold_run["wall_s"]), float(warm_run["wall_s"])
    figures: dict[str, Any] = {
        "gpu": gpu, "date": args.date, "command": args.command,
        "programs": len(cold), "rows": len(table),
        "cold_wall_s": round(cold_s, 1), "warm_wall_s": round(warm_s, 1),
        "agreement_median": None if agree["median"] is None else round(agree["median"], 4),
        "agreement_p95": None if agree["p95"] is None else round(agree["p95"], 4),
        "verdict_flips": len(agree["flips"]),
        "two_gpu_speedup": None,  # update_two_gpu, below, when both runs are given
        "harness_overhead_us_median": None, "evaluate_one_wall_s": None, "rl_eval_share": None,
        "details": {"agreement_rows": agree["rows"], "flipped_rows": agree["flips"],
                    "flipped_at_tolerance_edge": agree["edge_flips"],
                    "warm_over_cold": round(warm_s / cold_s, 3),
                    "cold_partial": bool(cold_run.get("partial")),
                    "cold_per_program_s": round(cold_s / max(len(cold), 1), 2),
                    "warm_per_program_s": round(warm_s / max(len(warm), 1), 2),
                    "cold_calls": cold_run.get("calls", 1), "warm_calls": warm_run.get("calls", 1),
                    "statuses": {s: sum(t["status"] == s for t in table) for s in sorted({t["status"] for t in table})}},
    }
    if args.overhead:
        summary = json.loads(args.overhead.read_text()).get("_summary", {})
        figures["harness_overhead_us_median"] = summary.get(args.overhead_key)
        if args.overhead_key != "harness_overhead_us_median":
            figures["details"]["overhead_key"] = args.overhead_key
    if args.evaluate_one:
        figures["evaluate_one_wall_s"] = json.loads(args.evaluate_one.read_text())["wall_s"]
    if args.rl:
        figures["rl_eval_share"] = eval_share(learning_report(args.rl)["rl_epoch"])
    if args.one_gpu and args.two_gpu:
        update_two_gpu(figures, args.one_gpu, args.two_gpu, args.command, args.date, args.build_cache)
    if args.keep_from:
        keep_earlier(figures, json.loads(args.keep_from.read_text()))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps({k: v for k, v in figures.items() if k != "details"}))


if __name__ == "__main__":
    main()
