"""Does the CPU core a timed worker runs on decide how fast a launch-bound program runs? Launch-bound
references (several small PyTorch operations the host launches one by one) move between runs by 20-50%
(docs/benchmarks/release-h100.md, "Run-to-run differences come from the host"). This times such
references in this one process, pinned to each allowed core in turn, in rounds, as the timed loop times
a call (device-wide sync, host clock, forward, device-wide sync), and counts the interrupts each core
took while it timed. A core that is slow in every round (its interrupts, its SMT sibling) shows as a
column; a host that is slow at times shows as a round.

    PYTHONPATH=. python3 benchmarks/core_noise.py --release carry/h100.jsonl --rows L2-70,L2-25,L2-53 \
        --device cuda:0 --json $OUT/core-noise.json

Problem code only (trusted references); no candidate runs here.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cudal1.problems import load_cudal1_release  # noqa: E402


def interrupts() -> list[int]:
    """Interrupts taken so far by each CPU (every source summed), from /proc/interrupts."""
    try:
        lines = Path("/proc/interrupts").read_text().splitlines()
    except OSError:
        return []
    cpus = len(lines[0].split())
    totals = [0] * cpus
    for line in lines[1:]:
        fields = line.split()[1:1 + cpus]
        for i, f in enumerate(fields):
            if f.isdigit():
                totals[i] += int(f)
    return totals


def gpu_interrupt_lines() -> list[str]:
    try:
        return [line.strip()[:160] for line in Path("/proc/interrupts").read_text().splitlines() if "nvidia" in line]
    except OSError:
        return []


def siblings() -> dict[int, str]:
    out = {}
    for cpu in sorted(os.sched_getaffinity(0)):
        p = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")
        out[cpu] = p.read_text().strip() if p.exists() else "?"
    return out


def load(source: str, device: torch.device) -> tuple[torch.nn.Module, list[Any]]:
    module = types.ModuleType("reference")
    exec(compile(source, "reference.py", "exec"), module.__dict__)  # noqa: S102 - a benchmark problem's code
    torch.manual_seed(0)
    with torch.device(device):
        model = module.Model(*module.get_init_inputs()).to(device).eval()
        inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in module.get_inputs()]
    return model, inputs


def timed_calls(call: Callable[[], Any], calls: int, sync: Callable[[], None],
                after: Callable[[], None] | None = None) -> list[float]:
    """Milliseconds of each call, as the timed loop takes them: device idle, host clock, call, device-wide
    sync; ``after`` runs after each call, outside its time."""
    out = []
    for _ in range(calls):
        sync()
        t0 = time.perf_counter()
        call()
        sync()
        out.append((time.perf_counter() - t0) * 1e3)
        if after is not None:
            after()
    return out


def time_on_core(model: torch.nn.Module, inputs: list[Any], seconds: float, calls: int = 50) -> list[float]:
    """Median ms per call of each batch of ``calls``, for ``seconds``, as the timed loop times a call."""
    sync = torch._C._cuda_synchronize
    medians = []
    end = time.perf_counter() + seconds
    with torch.no_grad():
        for _ in range(10):
            model(*inputs)
        while time.perf_counter() < end:
            medians.append(statistics.median(timed_calls(lambda: model(*inputs), calls, sync)))
    return medians


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--release", required=True, type=Path)
    ap.add_argument("--rows", default="L2-70,L2-25,L2-53")
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--seconds", type=float, default=1.0, help="per core, per row, per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    device = torch.device(args.device)
    torch.cuda.set_device(device)
    rows = {r.problem.problem_id: r.problem for r in load_cudal1_release(args.release)}
    cores = sorted(os.sched_getaffinity(0))
    result: dict[str, Any] = {"device": torch.cuda.get_device_name(device), "cores": cores,
                              "siblings": siblings(), "gpu_interrupts": gpu_interrupt_lines(), "rows": {}}
    models = {pid: load(rows[pid].source, device) for pid in args.rows.split(",")}
    for pid, (model, inputs) in models.items():
        table: dict[int, list[float]] = {c: [] for c in cores}
        irq: dict[int, list[float]] = {c: [] for c in cores}
        for _ in range(args.rounds):
            for core in cores:
                os.sched_setaffinity(0, {core})
                before, t0 = interrupts(), time.perf_counter()
                medians = time_on_core(model, inputs, args.seconds)
                after, wall = interrupts(), time.perf_counter() - t0
                table[core].append(round(statistics.median(medians), 4))
                if before and after:
                    irq[core].append(round((after[core] - before[core]) / wall))
        os.sched_setaffinity(0, set(cores))
        result["rows"][pid] = {"ms_by_core_and_round": table, "interrupts_per_s": irq}
        print(pid, "ms per call by core (rounds):")
        for core in cores:
            print(f"  core {core:3d} siblings {result['siblings'][core]:>8}  {table[core]}  irq/s {irq[core]}")
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
