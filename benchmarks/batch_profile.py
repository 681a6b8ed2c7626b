"""Where a timed batch's wall goes besides its timed calls, per release reference: the worker's timing
command as a trial sends it (the protocol's calls per trial), its wall against the sum of its timed calls,
the part of it that does not grow with the calls (a batch of 2 calls against one of the protocol's), the
warm-up command a trial sends before it, and the device time of every kernel over a batch by name
(torch.profiler), so the harness's own kernels (draws, staging copy, fingerprint sums, L2 flush) read beside
the program's.

    PYTHONPATH=. python3 benchmarks/batch_profile.py --release carry/h100.jsonl \
        --rows L1-5,L1-40,L1-36,L2-46 --device cuda:0 --json $OUT/batch-profile.json
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

from benchmarks.timing_overhead import _load, protocol_calls  # noqa: E402
from cudal1.evaluator.workers import new_seed  # noqa: E402
from cudal1.problems import load_cudal1_release  # noqa: E402

_SPOTS: list[Path] = []  # where a CPU worker writes spot outputs: made on the first batch, not at import


def _message(worker: Any, calls: int, spot: list[int]) -> dict[str, Any]:
    if not _SPOTS:
        _SPOTS.append(Path(tempfile.mkdtemp(prefix="cudal1-batch-profile-")))
    return {"cmd": "time", "warmup_seeds": [], "seeds": [new_seed() for _ in range(calls)], "spot": spot,
            "print_key": new_seed(), "clock": "host", "device_draws": worker.counted is not None,
            "idle_device": worker.device.type == "cuda", "spot_path": str(_SPOTS[0] / f"spot-{new_seed()}.pt")}


def _batch(worker: Any, calls: int, spot: list[int] | None = None) -> tuple[float, float, float]:
    """One trial's side as the parent sends it: warm-up command, then the timing command. Its walls (ms)
    and its timed calls summed (ms)."""
    t0 = time.perf_counter()
    worker.warm({"seed": new_seed()})
    t1 = time.perf_counter()
    reply = worker.time_trial(_message(worker, calls, spot or []))
    t2 = time.perf_counter()
    for block in worker.keep:  # spot outputs shipped as device memory: the parent would release them
        block.release()
    worker.keep = []
    return (t1 - t0) * 1e3, (t2 - t1) * 1e3, sum(reply["ms"])


def _kernels(worker: Any, calls: int) -> dict[str, float]:
    """Device ms per batch of each kernel name (and memset/memcpy), over two batches."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(2):
            _batch(worker, calls)
        torch.cuda.synchronize()
    totals: dict[str, float] = {}
    for event in prof.key_averages():
        us = float(getattr(event, "self_device_time_total", 0.0) or getattr(event, "self_cuda_time_total", 0.0))
        if us > 0:
            totals[event.key[:80]] = totals.get(event.key[:80], 0.0) + us / 2e3
    return dict(sorted(((k, round(v, 3)) for k, v in totals.items()), key=lambda kv: -kv[1])[:14])


def profile_row(problem: Any, device: torch.device, repeats: int) -> dict[str, Any]:
    worker = _load(problem, device)
    calls = protocol_calls(worker)
    for _ in range(3):
        _batch(worker, calls)
    warms, walls, timed = [], [], []
    for _ in range(repeats):
        warm, wall, ms = _batch(worker, calls)
        warms.append(warm)
        walls.append(wall)
        timed.append(ms)
    short = [_batch(worker, 2)[1:] for _ in range(repeats)]
    spot = [_batch(worker, calls, [calls // 2])[1] for _ in range(max(3, repeats // 4))]
    wall, ms = statistics.median(walls), statistics.median(timed)
    short_wall, short_ms = statistics.median(s[0] for s in short), statistics.median(s[1] for s in short)
    extra_calls = max(1, calls - 2)  # the protocol's batch against the 2-call one
    per_call, per_timed_call = (wall - short_wall) / extra_calls, (ms - short_ms) / extra_calls
    out = {"calls": calls, "command_ms": round(wall, 3), "timed_ms": round(ms, 3), "warm_cmd_ms": round(statistics.median(warms), 3),
           "outside_calls_ms": round(wall - ms, 3),
           "per_call_us": round(1e3 * per_call, 1),
           "per_call_outside_us": round(1e3 * (per_call - per_timed_call), 1),
           "fixed_ms": round(short_wall - 2 * per_call, 3),
           "spot_command_ms": round(statistics.median(spot), 3)}
    if device.type == "cuda":
        out["kernels_ms_per_batch"] = _kernels(worker, calls)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--release", type=Path, required=True, help="a CUDA-L1 release JSONL (its references)")
    ap.add_argument("--rows", required=True, help="comma-separated problem ids")
    ap.add_argument("--device", default="cuda:0" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--repeats", type=int, default=8)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    wanted = args.rows.split(",")
    by_id = {r.problem.problem_id: r.problem for r in load_cudal1_release(args.release)}
    missing = [w for w in wanted if w not in by_id]
    if missing:
        sys.exit(f"--rows: not in {args.release}: {', '.join(missing)}")
    device = torch.device(args.device)
    report: dict[str, Any] = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"}
    for row in wanted:
        try:
            report[row] = profile_row(by_id[row], device, args.repeats)
        except Exception as exc:  # one row's failure should not lose the others' figures
            report[row] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        print(row, json.dumps(report[row]), flush=True)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
