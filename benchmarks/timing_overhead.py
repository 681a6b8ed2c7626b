"""The harness's overhead per timed call, as the protocol pays it: the wall clock of a whole timed batch
(``Worker.time_trial``, with the protocol's own calls per trial) per call, less the timed forward and the
L2 flush, for each chosen problem's reference loaded in a worker as an evaluation loads it.
``_summary.harness_overhead_us_median`` is the figure results/release-h200 quotes.

    PYTHONPATH=. python3 benchmarks/timing_overhead.py --release carry/h100.jsonl \\
        --rows L1-1,L1-19,L2-12 --device cuda:0 --json $OUT/overhead.json
    python benchmarks/timing_overhead.py --problems starter --rows starter-L1-1 --device cpu   # a CPU machine
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cudal1.evaluator.config import EvalConfig  # noqa: E402
from cudal1.evaluator.core import calls_per_trial  # noqa: E402
from cudal1.evaluator.worker import Worker  # noqa: E402
from cudal1.evaluator.workers import draws_path, new_seed  # noqa: E402
from cudal1.problems import Problem, load_cudal1_release, load_problems  # noqa: E402


def load_reference(problem: Problem, device: torch.device) -> Worker:
    """The problem's reference (trusted problem code) in a worker of this process, loaded as an evaluation
    loads it: inputs and flush as a captured graph, the harness's draw kernels where they compile."""
    with tempfile.TemporaryDirectory(prefix="cudal1-overhead-") as tmp:
        path = Path(tmp) / "reference.py"
        path.write_text(problem.source)
        worker = Worker(str(device), 1, flush_l2=True)
        reply = worker.load({"role": "reference", "reference_path": str(path), "init_seed": 0, "graph_inputs": True,
                             "device_draws": draws_path(EvalConfig(device=str(device)))})
        if not reply.get("ok"):
            raise RuntimeError(f"reference did not load: {reply}")
    return worker


def batch_message(worker: Worker, calls: int) -> dict[str, Any]:
    return {"cmd": "time", "warmup_seeds": [new_seed()], "seeds": [new_seed() for _ in range(calls)], "spot": [],
            "print_key": new_seed(), "device_draws": worker.counted is not None}


def protocol_calls(worker: Worker) -> int:
    """Calls per trial as the parent chooses them under the default protocol (from a two-call batch), so
    that a trial lasts about EvalConfig.target_trial_ms."""
    return calls_per_trial(EvalConfig(), [worker.time_trial(batch_message(worker, 2))])


def flush_ms(worker: Worker) -> float:
    """The L2 flush's own device time (CUDA events around 20 of them), 0 off CUDA."""
    if worker.device.type != "cuda":
        return 0.0
    assert worker.l2 is not None
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    worker._sync()
    start.record()
    for _ in range(20):
        worker.l2()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 20


def batch_overhead(worker: Worker, calls: int, batches: int = 5) -> dict[str, float]:
    """The protocol's timed batch, as the parent sends it: wall clock per call minus the timed forward and
    the L2 flush (what the harness adds beside them), median over ``batches``."""
    flush = flush_ms(worker)
    per_call, forward, overhead = [], [], []
    for _ in range(batches):
        msg = batch_message(worker, calls)
        worker.time_trial(msg | {"seeds": msg["seeds"][:2]})  # a warm-up batch: first-call effects out
        t0 = time.perf_counter()
        reply = worker.time_trial(msg)
        wall_ms = (time.perf_counter() - t0) * 1e3
        timed_ms = statistics.median(reply["ms"])
        per_call.append(wall_ms / calls)
        forward.append(timed_ms)
        overhead.append(wall_ms / calls - timed_ms - flush)
    return {"batch_per_call_ms": round(statistics.median(per_call), 4),
            "batch_forward_ms": round(statistics.median(forward), 4), "l2_flush_ms": round(flush, 4),
            "harness_overhead_us": round(statistics.median(overhead) * 1e3, 1)}


def measure(problems: list[Problem], device: torch.device) -> dict[str, Any]:
    """Each problem's figures (or its error), and their ``_summary``."""
    report: dict[str, Any] = {}
    for problem in problems:
        try:
            worker = load_reference(problem, device)
            calls = protocol_calls(worker)
            report[problem.problem_id] = batch_overhead(worker, calls) | {"protocol_calls": calls}
            del worker
        except Exception as exc:  # noqa: BLE001 - one problem's failure should not lose the others' figures
            report[problem.problem_id] = {"error": f"{type(exc).__name__}: {exc}"[:200]}
        print(problem.problem_id, report[problem.problem_id], flush=True)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    overheads = [r["harness_overhead_us"] for r in report.values() if "harness_overhead_us" in r]
    if overheads:
        report["_summary"] = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                              "problems": len(overheads),
                              "harness_overhead_us_median": round(statistics.median(overheads), 1),
                              "protocol_calls_median": statistics.median(r["protocol_calls"] for r in report.values()
                                                                         if "protocol_calls" in r)}
    return report


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--release", type=Path, help="a CUDA-L1 release JSONL (its references are measured)")
    ap.add_argument("--problems", default="", help="a suite instead, e.g. starter")
    ap.add_argument("--rows", default="", help="comma-separated problem ids (default: all)")
    ap.add_argument("--device", default="cuda:0" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    if args.release:
        problems = [r.problem for r in load_cudal1_release(args.release)]
    elif args.problems:
        problems = load_problems(args.problems)
    else:
        ap.error("--release or --problems: which problems to measure")
    if args.rows:
        wanted = set(args.rows.split(","))
        problems = [p for p in problems if p.problem_id in wanted]
    report = measure(problems, torch.device(args.device))
    print("summary", report.get("_summary"), flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
