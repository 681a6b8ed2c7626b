"""The harness's own kernels on a large tensor against the device's memory roof: the fingerprint sums
(device_draws.DeviceDraws.sums) at 4 to 32 blocks per SM, the draws of each kind (DeviceDraws.fill)
against torch's in-place draws of the same distribution, and a plain copy of the same bytes. Device ms by CUDA
events, median of repeats.

    PYTHONPATH=. python3 benchmarks/harness_kernels.py --device cuda:0 --numel 67108864 --json $OUT/kernels.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cudal1.evaluator import device_draws  # noqa: E402
from cudal1.evaluator.fingerprints import SHIFT  # noqa: E402


def _device_ms(step: Callable[[], object], repeats: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = []
    for _ in range(repeats + 2):
        torch.cuda.synchronize()
        start.record()
        step()
        end.record()
        end.synchronize()
        out.append(start.elapsed_time(end))
    return round(statistics.median(out[2:]), 4)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--numel", type=int, default=64 << 20)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    device = torch.device(args.device)
    path = device_draws.fatbin(Path(tempfile.mkdtemp(prefix="cudal1-kernels-")))
    if path is None:
        sys.exit("the harness's kernels did not compile here (nvcc?)")
    kernels = device_draws.DeviceDraws(str(path), device)
    n = args.numel
    x = torch.randn((1, n), device=device)
    p = torch.randint(0, 2, (n,), dtype=torch.int8, device=device).mul_(2).sub_(1)
    a = torch.randint(0, 2, (n + SHIFT,), dtype=torch.int8, device=device).mul_(2).sub_(1)
    offsets = torch.zeros(1, dtype=torch.int64, device=device)
    report: dict[str, object] = {"device": torch.cuda.get_device_name(device), "numel": n, "sms": kernels.sms}
    copy_to = torch.empty_like(x)
    report["copy_ms"] = _device_ms(lambda: copy_to.copy_(x), args.repeats)  # reads and writes n floats
    report["roof_read_ms"] = round(report["copy_ms"] / 2, 4)  # type: ignore[operator]
    sums = {}
    reference = kernels.sums(x, p, a, offsets, 1, n)
    launched = device_draws.SUMS_BLOCKS_PER_SM
    for per_sm in (4, 8, 16, 32):  # blocks per SM over the rows; the kernels launch SUMS_BLOCKS_PER_SM
        device_draws.SUMS_BLOCKS_PER_SM = per_sm
        got = kernels.sums(x, p, a, offsets, 1, n)
        sums[f"blocks_per_sm_{per_sm}"] = {
            "ms": _device_ms(lambda: kernels.sums(x, p, a, offsets, 1, n), args.repeats),
            "max_rel_diff": float(((got - reference).abs() / reference.abs().clamp_min(1e-30)).max())}
    device_draws.SUMS_BLOCKS_PER_SM = launched
    report["sums_blocks_per_sm_launched"] = launched
    report["sums"] = sums
    report["sums_read_gb"] = round(n * 5 / 1e9, 3)  # float32 values and int8 weights
    kernels.start(1)
    draws = {  # (kind, dtype) -> the torch call that makes the same distribution in place
        "normal_f32": (0, torch.float32, lambda t: t.normal_()), "normal_f16": (0, torch.float16, lambda t: t.normal_()),
        "normal_f64": (0, torch.float64, lambda t: t.normal_()), "uniform_f32": (1, torch.float32, lambda t: t.uniform_()),
        "integer_i64": (2, torch.int64, lambda t: t.random_(0, 10))}
    for name, (kind, dtype, theirs) in draws.items():
        draw = device_draws.Draw(kind=kind, shape=(n,), dtype=dtype, low=0, high=10 if kind == 2 else 0)
        out = torch.empty(n, device=device, dtype=dtype)
        report[f"draw_{name}_ms"] = _device_ms(lambda out=out, draw=draw: kernels.fill(out, draw, 0), args.repeats)
        report[f"torch_{name}_ms"] = _device_ms(lambda out=out, theirs=theirs: theirs(out), args.repeats)
    out = torch.empty(n, device=device)
    report["zero_ms"] = _device_ms(lambda: out.zero_(), args.repeats)
    print(json.dumps(report, indent=1))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
