"""Does work on another of this machine's cores slow the core a device times on? On the GPU hosts the same
pure Python work on the timed core took 1.0-1.2 ms in some spells and 1.6-2.1 ms in others, with no
steal time counted and the GPU at full clock (docs/gpu-runs.md#2026-11-27-host-pace): the core itself
ran slower. A virtual machine shows every vCPU as a core of its own (no SMT siblings in its topology),
but two vCPUs can still be the two hardware threads of one physical core, and then each slows the other
by a third or more whenever both work. If the timed core's hidden sibling is one of the cores where
builds, loads and worker starts run (cudal1/evaluator/cores.py puts them on the lower half), the
evaluator slows its own timing in spells that follow its own background work.

For each timed core this times a fixed piece of pure Python work (cudal1/evaluator/pace.py's probe) with
every other core idle and with one busy process pinned to it, core by core, in rounds; a core that
slows the timed one by ``--suspect`` or more in every round is named as its sibling.

    PYTHONPATH=. python3 benchmarks/hidden_siblings.py --json $OUT/siblings.json
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
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cudal1.evaluator.cores import timed_core  # noqa: E402
from cudal1.evaluator.pace import probe_ms  # noqa: E402

SPIN = "import os, sys\nos.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True:\n    pass\n"


def block_ms(probes: int) -> float:
    """The median of ``probes`` readings of the probe on this process's core (ms)."""
    return statistics.median(probe_ms(20_000) for _ in range(probes))


def busy(core: int) -> subprocess.Popen[bytes]:
    """A process that keeps ``core`` busy until killed (pinned there before it spins)."""
    return subprocess.Popen([sys.executable, "-c", SPIN, str(core)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def slowdowns(timed: int, others: list[int], rounds: int, probes: int, settle_s: float = 0.1) -> dict[int, list[float]]:
    """For each other core, per round: the timed core's probe with that core busy over the same probe
    with every core idle just before (1.0: no effect)."""
    os.sched_setaffinity(0, {timed})
    out: dict[int, list[float]] = {c: [] for c in others}
    for _ in range(rounds):
        for core in others:
            idle = block_ms(probes)
            spinner = busy(core)
            try:
                time.sleep(settle_s)
                loaded = block_ms(probes)
            finally:
                spinner.kill()
                spinner.wait()
            out[core].append(round(loaded / idle, 3))
    return out


def suspects(table: dict[int, list[float]], threshold: float) -> list[int]:
    """Cores that slowed the timed core by ``threshold`` or more in every round.

    >>> suspects({3: [1.42, 1.38], 4: [1.01, 1.6], 5: [0.99, 1.0]}, 1.15)
    [3]
    """
    return [c for c, ratios in table.items() if ratios and min(ratios) >= threshold]


def default_timed(devices: int) -> list[int]:
    """The cores the evaluator times on for ``devices`` GPUs (cores.timed_core), or the highest core this
    process may use where there are too few to give one away."""
    cores = [timed_core(f"cuda:{i}") for i in range(devices)]
    return sorted({c for c in cores if c is not None}, reverse=True) or [max(os.sched_getaffinity(0))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--timed", default=None, help="cores to test, comma-separated (default: the evaluator's timed "
                    "cores for --devices GPUs)")
    ap.add_argument("--devices", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--probes", type=int, default=60, help="probe readings per block (~1 ms each)")
    ap.add_argument("--suspect", type=float, default=1.15, help="slow-down in every round that names a sibling")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    allowed = sorted(os.sched_getaffinity(0))
    try:
        timed = [int(c) for c in args.timed.split(",")] if args.timed else default_timed(args.devices)
    except ValueError:
        raise SystemExit(f"hidden_siblings.py: --timed takes core numbers like 15,14, not {args.timed!r}") from None
    missing = [c for c in timed if c not in allowed]
    if missing:
        raise SystemExit(f"hidden_siblings.py: cores {missing} are not among this process's cores {allowed}")
    result: dict[str, Any] = {"cores": allowed, "rounds": args.rounds, "probes": args.probes, "suspect": args.suspect,
                              "timed": {}}
    t0 = time.perf_counter()
    for core in timed:
        table = slowdowns(core, [c for c in allowed if c != core], args.rounds, args.probes)
        named = suspects(table, args.suspect)
        result["timed"][str(core)] = {"slowdown_by_core": {str(c): r for c, r in table.items()}, "siblings": named}
        worst = sorted(table.items(), key=lambda kv: -statistics.median(kv[1]))[:3]
        print(f"timed core {core}: siblings {named or 'none'}; most slowing {worst}", flush=True)
    os.sched_setaffinity(0, set(allowed))
    result["wall_s"] = round(time.perf_counter() - t0, 1)
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
