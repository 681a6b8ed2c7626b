"""Where the timing noise comes from: the same release rows evaluated one at a time, alone on the device
(nothing else of a batch running), several times, with per-trial details (CUDAL1_TIMING_TRACE), while
nvidia-smi samples the GPU's clocks, power and throttle reasons every 100 ms. Compare the per-trial
ratios' spread here with the same rows in a batch (benchmarks/release_eval.py) to tell device state
(clocks, power) from interference by the batch's other processes.

    PYTHONPATH=. python benchmarks/timing_noise.py --release carry/h100.jsonl --rows L3-29,L1-24 \
        --repeats 2 --device cuda:0 --out $OUT/noise
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cudal1.candidates import Candidate  # noqa: E402
from cudal1.evaluator import EvalConfig, evaluate_candidate  # noqa: E402
from cudal1.problems import load_cudal1_release  # noqa: E402


def spread(ratios: list[float]) -> float:
    """Relative range of the middle half of the per-trial ratios (robust to one odd trial)."""
    if len(ratios) < 4:
        return float("nan")
    q = statistics.quantiles(ratios, n=4)
    return (q[2] - q[0]) / statistics.median(ratios)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--release", type=Path, required=True)
    ap.add_argument("--rows", required=True, help="comma-separated problem ids")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    os.environ["CUDAL1_TIMING_TRACE"] = "1"
    args.out.mkdir(parents=True, exist_ok=True)
    wanted = args.rows.split(",")
    rows = {r.problem.problem_id: r for r in load_cudal1_release(args.release) if r.candidate_source}
    smi = None
    if args.device.startswith("cuda"):
        try:
            smi = subprocess.Popen(
                ["nvidia-smi", "--query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,"
                 "clocks_throttle_reasons.active", "--format=csv,noheader", "-lms", "100"],
                stdout=(args.out / "smi.csv").open("w"), stderr=subprocess.DEVNULL)
        except OSError:
            smi = None
    config = EvalConfig(device=args.device)
    report = []
    try:
        for k in range(args.repeats):
            for pid in wanted:
                row = rows[pid]
                cand = Candidate(pid, row.candidate_source or "", origin="noise-probe")
                t0 = time.time()
                ev = evaluate_candidate(row.problem, cand, config)
                extra = ev.extra if isinstance(ev.extra, dict) else json.loads(ev.extra or "{}")
                ratios = [t["ratio"] for t in extra.get("trace", [])]
                entry = {"row": pid, "repeat": k, "start": t0, "end": time.time(), "status": ev.status.value,
                         "speedup": ev.speedup, "low": ev.speedup_low, "high": ev.speedup_high,
                         "trials": ev.trials, "iqr_spread": round(spread(ratios), 4), "trace": extra.get("trace", [])}
                report.append(entry)
                # written after every evaluation: a run cut short by its time limit keeps what it measured
                (args.out / "noise.json").write_text(json.dumps(report, indent=1))
                print(pid, k, ev.status.value, ev.speedup and round(ev.speedup, 3), "trials", ev.trials,
                      "iqr", entry["iqr_spread"], flush=True)
    finally:
        if smi is not None:
            smi.terminate()


if __name__ == "__main__":
    main()
