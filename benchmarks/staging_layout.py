"""What the harness's per-call output fingerprints cost for one output in different memory layouts.

The wall-clock cross-check (cudal1/evaluator/timing.py, ``forged_timing``) assumes the work around the
timed calls costs both programs the same. Staging a channels_last or transposed output in logical order
is a permuting copy on every call, which the reference's contiguous output never pays; CUDA-L1's
L1-59/62/63/81 were rejected as "timing does not add up" on both H100 and H200. This script times, per
call and per layout, the staging copy in logical order (the old way) and the whole fingerprint as the
harness now takes it (staged in memory order, sums per batch):

    PYTHONPATH=. python3 benchmarks/staging_layout.py --device cuda:0 [--calls 40] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from cudal1.evaluator.probes import Fingerprints

# L1-63's output (a 3x3 conv of 16x3x256x256 to 64 channels) and a 5-d output transposed as L1-59's is
SHAPES = {"conv2d": (16, 64, 254, 254), "conv3d_as_2d": (16, 64, 126, 126, 10)}


def layouts(shape: tuple[int, ...], device: torch.device) -> dict[str, torch.Tensor]:
    x = torch.randn(shape, device=device)
    out = {"contiguous": x}
    if len(shape) == 4:
        out["channels_last"] = x.contiguous(memory_format=torch.channels_last)
    else:  # memory order (0, 4, 2, 3, 1) seen logically as (0, 1, 2, 3, 4): L1-59's transposes
        out["transposed"] = x.transpose(1, 4).contiguous().transpose(1, 4)
    return out


def timed(fn, calls: int, device: torch.device, repeats: int = 5) -> float:
    """Median over repeats of the per-call device time of ``calls`` calls, ms."""
    per_call = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn(calls)
            end.record()
            end.synchronize()
            per_call.append(start.elapsed_time(end) / calls)
        else:
            t = time.perf_counter()
            fn(calls)
            per_call.append((time.perf_counter() - t) * 1e3 / calls)
    return statistics.median(per_call)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda:0" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    device = torch.device(args.device)
    rows = []
    for name, shape in SHAPES.items():
        for layout, x in layouts(shape, device).items():
            row = torch.empty(shape, device=device)

            def logical_copy(calls: int, x: torch.Tensor = x, row: torch.Tensor = row) -> None:
                for _ in range(calls):
                    row.copy_(x)

            def fingerprints(calls: int, x: torch.Tensor = x) -> None:
                prints = Fingerprints(device, key=7, calls=calls)
                for seed in range(calls):
                    prints.add([x], seed)
                prints.values()

            result = {"shape": name, "layout": layout, "order": list(Fingerprints._order(x)),
                      "logical_copy_ms": round(timed(logical_copy, args.calls, device), 4),
                      "fingerprint_ms": round(timed(fingerprints, args.calls, device), 4)}
            rows.append(result)
            print(result, flush=True)
            del row
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    report = {"device": name, "calls": args.calls, "rows": rows}
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
