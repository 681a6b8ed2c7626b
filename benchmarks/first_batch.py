"""What a fresh worker's first timed batch costs beyond its later ones, with and without the harness's
kernels launched at the worker's start (``probes.warm_kernels``, which cudal1/evaluator/worker_main.py
calls before any program code). Each measurement is a new process: a worker as the evaluator starts one
(CUDA context, then the harness's warm-up or not), the reference of a release row loaded, then three
calibration batches (``cmd: time`` with three warm-up calls and two timed ones, as trials.py sends it),
each timed on the host's clock. Modes alternate, ``--rounds`` times per row.

    PYTHONPATH=. python benchmarks/first_batch.py --release carry/h100.jsonl --rows L1-22,L2-14,L1-92 \
        --rounds 3 --json $OUT/first-batch.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cudal1.problems import load_cudal1_release  # noqa: E402

_CHILD = """
import json, sys, time
import torch
from cudal1.evaluator.probes import warm_kernels
from cudal1.evaluator.worker import Worker
from cudal1.evaluator.workers import new_seed
mode, path = sys.argv[1], sys.argv[2]
worker = Worker("cuda:0", 1, flush_l2=True)
torch.zeros(1, device="cuda:0")
t0 = time.perf_counter()
if mode == "warm":
    warm_kernels(worker.device)
warm_s = time.perf_counter() - t0
reply = worker.load({"role": "reference", "reference_path": path, "init_seed": 0, "graph_inputs": True})
assert reply["ok"], reply
batches = []
for _ in range(3):
    msg = {"cmd": "time", "warmup_seeds": [new_seed() for _ in range(3)], "seeds": [new_seed(), new_seed()],
           "spot": [], "print_key": new_seed(), "clock": "host"}
    t0 = time.perf_counter()
    worker.time_trial(msg)
    batches.append(round((time.perf_counter() - t0) * 1e3, 2))
print(json.dumps({"warm_kernels_ms": round(warm_s * 1e3, 2), "batches_ms": batches}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--release", required=True, type=Path)
    ap.add_argument("--rows", default="L1-22,L2-14,L1-92")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    wanted = args.rows.split(",")
    problems = {r.problem.problem_id: r.problem for r in load_cudal1_release(args.release)}
    report: dict[str, dict[str, list[dict]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for pid in wanted:
            path = Path(tmp) / f"{pid}.py"
            path.write_text(problems[pid].source)
            for _ in range(args.rounds):
                for mode in ("cold", "warm"):
                    out = subprocess.run([sys.executable, "-c", _CHILD, mode, str(path)], capture_output=True,
                                         text=True, timeout=300)
                    line = (out.stdout.strip().splitlines() or ["{}"])[-1]
                    result = json.loads(line) if out.returncode == 0 else {"error": out.stderr[-400:]}
                    report.setdefault(pid, {}).setdefault(mode, []).append(result)
                    print(pid, mode, result, flush=True)
    summary = {}
    for mode in ("cold", "warm"):
        first = [r["batches_ms"][0] for modes in report.values() for r in modes[mode] if "batches_ms" in r]
        later = [r["batches_ms"][2] for modes in report.values() for r in modes[mode] if "batches_ms" in r]
        if first:
            summary[mode] = {"first_batch_ms_median": statistics.median(first),
                             "third_batch_ms_median": statistics.median(later)}
    print("summary", json.dumps(summary), flush=True)
    if args.json:
        args.json.write_text(json.dumps({"rows": report, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
