"""What moving a timed worker to another core costs the next reading and the next call (EvalConfig.fast_core).

With ``fast_core`` 3 the calls that were still slow after three moves ran 2.6-4.2x the fast ones, far beyond
the host's two levels (1.6x; docs/gpu-runs.md#2026-11-29-fast-core-release). Either the host stalls as a
whole, or the move itself slows what follows it: the thread lands on a core whose caches hold none of its
code, so the probe right after a move reads slow (and moves it again), and the call after the last move
starts cold. This tells the two apart on one launch-bound call (``--ops`` small kernels back to back,
launched eagerly), interleaving at random, so every mode sees the same spells of the host:

- ``stay``: probe, probe, call, on the core the worker is on;
- ``move``: move to the next core, probe, probe, call (the first probe is the reading right after a move);
- ``stay_bare`` / ``move_bare``: the call alone, without or right after a move;
- ``hop``: cores.CoreHop.before_call(3) then the call, as the timed loop does;
- ``hop_warm``: the same with a discarded probe after each move (``CoreHop(settle=True)``).

Per mode: the median and 90th percentile of each probe and of the call (ms), and of the move itself (µs);
for ``hop`` and ``hop_warm``, the calls split by whether the last reading was at the fast level.

    PYTHONPATH=. python3 benchmarks/move_cost.py --seconds 20 --json $OUT/move-cost.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from cudal1.evaluator.cores import CoreHop, hop_cores, set_affinity  # noqa: E402
from cudal1.evaluator.pace import CALL_PROBE_STEPS, FAST_SLACK, probe_ms  # noqa: E402

MODES = ("stay", "move", "stay_bare", "move_bare", "hop", "hop_warm")


def _q(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return round(values[min(len(values) - 1, int(q * len(values)))], 4)


def summary(values: list[float]) -> dict[str, Any]:
    return {"n": len(values), "median": _q(values, 0.5), "p90": _q(values, 0.9)}


def measure(device: str, cores: list[int], seconds: float, ops: int, seed: int = 0) -> dict[str, Any]:
    """Every mode's readings, interleaved at random over ``seconds``."""
    x = torch.randn(1024, device=device)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)

    def call() -> float:
        sync()
        t0 = time.perf_counter()
        y = x
        for _ in range(ops):
            y = y * 1.0001 + 0.5
        sync()
        return (time.perf_counter() - t0) * 1e3

    probe = lambda: probe_ms(CALL_PROBE_STEPS)  # noqa: E731
    at = [0]

    def move() -> float:
        at[0] = (at[0] + 1) % len(cores)
        t0 = time.perf_counter()
        set_affinity(cores[at[0]])
        return (time.perf_counter() - t0) * 1e6

    hop = CoreHop(cores, probe)
    hop_warm = CoreHop(cores, probe, settle=True)
    allowed = os.sched_getaffinity(0)
    set_affinity(cores[0])
    for _ in range(50):
        call()
    hop.start()
    hop.home()
    hop_warm.start()
    hop_warm.home()
    set_affinity(cores[0])
    rows: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
    rng = random.Random(seed)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        mode = rng.choice(MODES)
        row: dict[str, float] = {}
        if mode in ("move", "move_bare"):
            row["move_us"] = move()
        if mode in ("stay", "move"):
            row["p1"], row["p2"] = probe(), probe()
        if mode in ("hop", "hop_warm"):
            h = hop if mode == "hop" else hop_warm
            h.at = at[0]  # the core the thread is on now
            hops_before = h.hops
            row["reading"] = h.before_call(3)
            row["moves"] = h.hops - hops_before
            row["fast"] = float(row["reading"] <= FAST_SLACK * (h.floor or 0))
            at[0] = h.at
        row["call"] = call()
        rows[mode].append(row)
    set_affinity(allowed)
    floor = min(r[k] for m in ("stay", "move") for r in rows[m] for k in ("p1", "p2"))
    out: dict[str, Any] = {"device": device, "cores": cores, "ops": ops, "seconds": seconds,
                           "probe_floor_ms": round(floor, 4), "modes": {}}
    for mode, got in rows.items():
        entry: dict[str, Any] = {k: summary([r[k] for r in got if k in r])
                                 for k in ("p1", "p2", "call", "move_us", "reading", "moves")
                                 if any(k in r for r in got)}
        if mode in ("stay", "move"):
            # the call split by the level of the reading right before it
            entry["call_after_fast_p2"] = summary([r["call"] for r in got if r["p2"] <= FAST_SLACK * floor])
            entry["call_after_slow_p2"] = summary([r["call"] for r in got if r["p2"] > FAST_SLACK * floor])
            entry["p1_slow_share"] = round(statistics.mean(r["p1"] > FAST_SLACK * floor for r in got), 3) if got else None
            entry["p2_slow_share"] = round(statistics.mean(r["p2"] > FAST_SLACK * floor for r in got), 3) if got else None
        if mode in ("hop", "hop_warm"):
            entry["call_fast"] = summary([r["call"] for r in got if r["fast"]])
            entry["call_slow"] = summary([r["call"] for r in got if not r["fast"]])
            entry["call_no_move"] = summary([r["call"] for r in got if r["moves"] == 0])
            entry["call_moved"] = summary([r["call"] for r in got if r["moves"] > 0])
            entry["slow_share"] = round(statistics.mean(1 - r["fast"] for r in got), 3) if got else None
        out["modes"][mode] = entry
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda:0" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--ops", type=int, default=30, help="small kernels a call launches")
    parser.add_argument("--cores", default="", help="comma-separated; default: the device's hop_cores")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    cores = [int(c) for c in args.cores.split(",") if c] or hop_cores(args.device, 1) or sorted(os.sched_getaffinity(0))
    result = measure(args.device, cores, args.seconds, args.ops)
    text = json.dumps(result, indent=1)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
