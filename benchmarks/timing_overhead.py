"""Where a timed call's time goes besides the program itself: each step of the worker's timed loop
(cudal1/evaluator/worker.py, time_trial) timed on its own, in one process, for chosen problems.

Run M (docs/reproduction/h100.md) spent 706 s timing 161 rows, of which 82 s were the timed calls and
624 s everything around them (median 1.35 ms a call): this script says which step that is.

    PYTHONPATH=. python benchmarks/timing_overhead.py --release ../shared/cuda-l1/h100.jsonl \
        --rows L1-92,L2-46,L1-64,L1-1 --device cuda:0 --json $OUT/overhead.json
    python benchmarks/timing_overhead.py --problems starter --device cpu     # the CPU machine
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cudal1.evaluator.probes import L2Flush, fingerprint, flatten, to_device  # noqa: E402
from cudal1.problems import Problem, load_cudal1_release, load_problems  # noqa: E402


def _median_ms(step: Callable[[], Any], sync: Callable[[], None], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        step()
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def profile(problem: Problem, device: torch.device, repeats: int) -> dict[str, float]:
    """Median ms of each step of one timed call, the forward included for scale."""
    ns: dict[str, Any] = {"__name__": f"ref_{problem.problem_id.replace('-', '_')}"}
    exec(compile(problem.source, problem.problem_id, "exec"), ns)  # the reference only: trusted problem code
    torch.manual_seed(0)
    with torch.no_grad():
        model = ns["Model"](*ns["get_init_inputs"]())
    model = model.to(device) if isinstance(model, torch.nn.Module) else model
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    def inputs() -> list[Any]:
        torch.manual_seed(1234)
        with torch.device(device):
            made = ns["get_inputs"]()
        return list(to_device(made, device))

    x = inputs()
    with torch.no_grad():
        out = model(*x)
    _, outputs = flatten(out)
    flush = L2Flush(device, True)
    steps: dict[str, Callable[[], Any]] = {
        "inputs": inputs,
        "forward": lambda: model(*x),
        "fingerprint": lambda: fingerprint(outputs, 99),
        "sync": lambda: None,
    }
    if cuda:
        steps["l2_zero"] = lambda: flush.buf.zero_()  # type: ignore[union-attr]
        if flush.driver is not None:
            steps["l2_persisting_reset"] = lambda: (flush.driver.cuCtxSetLimit(0x06, 0),  # type: ignore[union-attr]
                                                    flush.driver.cuCtxResetPersistingL2Cache())  # type: ignore[union-attr]

        def events() -> None:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            end.record()
            end.synchronize()
            start.elapsed_time(end)

        steps["events"] = events
    with torch.no_grad():
        result = {name: round(_median_ms(step, sync, repeats), 4) for name, step in steps.items()}
    result["outside_forward"] = round(sum(v for k, v in result.items() if k != "forward"), 4)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--release", type=Path, help="a CUDA-L1 release JSONL (its references are profiled)")
    ap.add_argument("--problems", default="", help="a suite instead, e.g. starter")
    ap.add_argument("--rows", default="", help="comma-separated problem ids (default: all)")
    ap.add_argument("--device", default="cuda:0" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if args.release:
        problems = [r.problem for r in load_cudal1_release(args.release)]
    elif args.problems:
        problems = load_problems(args.problems)
    else:
        sys.exit("--release or --problems: which problems to profile")
    if args.rows:
        wanted = set(args.rows.split(","))
        problems = [p for p in problems if p.problem_id in wanted]
    device = torch.device(args.device)
    if device.type == "cpu":
        torch.set_num_threads(1)  # as the evaluator's workers
    report = {}
    for problem in problems:
        try:
            report[problem.problem_id] = profile(problem, device, args.repeats)
        except Exception as exc:  # one problem's failure should not lose the others' figures
            report[problem.problem_id] = {"error": f"{type(exc).__name__}: {exc}"[:200]}
        print(problem.problem_id, report[problem.problem_id], flush=True)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
