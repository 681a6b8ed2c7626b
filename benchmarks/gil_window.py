"""How long a thread that spins in Python keeps a GIL-releasing call from returning to its caller: the
window a candidate's hidden thread can hold open between its worker's device drain (a sync that releases
the GIL) and the worker's stop (docs/evaluator.md, "The wait for an idle device"). Runs anywhere, no GPU:

    python benchmarks/gil_window.py [--calls 50] [--json out.json]

A ``time.sleep`` of 0.2 ms stands for the sync; each call's lateness is its wall clock less the sleep,
alone and then beside one thread spinning in pure Python. The interpreter's switch interval bounds it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

SLEEP_S = 0.0002


def late_ms(calls: int) -> list[float]:
    """Each call's lateness (ms): the wall clock of a GIL-releasing 0.2 ms sleep, less the sleep."""
    out = []
    for _ in range(calls):
        t0 = time.perf_counter()
        time.sleep(SLEEP_S)
        out.append((time.perf_counter() - t0 - SLEEP_S) * 1e3)
    return out


def measure(calls: int) -> dict[str, Any]:
    """Lateness alone and beside one spinning Python thread, median and max (ms)."""
    alone = late_ms(calls)
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            pass

    spinner = threading.Thread(target=spin, daemon=True)
    spinner.start()
    try:
        beside = late_ms(calls)
    finally:
        stop.set()
        spinner.join()

    def summary(xs: list[float]) -> dict[str, float]:
        return {"median_ms": round(statistics.median(xs), 3), "max_ms": round(max(xs), 3)}

    return {"calls": calls, "switch_interval_ms": sys.getswitchinterval() * 1e3, "alone": summary(alone),
            "beside_spinning_thread": summary(beside)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    report = measure(args.calls)
    print(f"a 0.2 ms GIL-releasing call returned late by: alone median {report['alone']['median_ms']} ms "
          f"(max {report['alone']['max_ms']}), beside a spinning thread median "
          f"{report['beside_spinning_thread']['median_ms']} ms (max {report['beside_spinning_thread']['max_ms']}); "
          f"switch interval {report['switch_interval_ms']:g} ms")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
