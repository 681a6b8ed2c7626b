"""Whether the host's CPU runs slower on a timed core while other cores are busy.

On 2x H200 hosts every run on both GPUs read the host's own pace on the timed core (cudal1/evaluator/
pace.py: a fixed piece of Python work, no device work in it) 11-19% slower than a one-GPU run, with one
evaluating process or one per GPU, and the rows' host work followed it (docs/gpu-runs.md#2026-11-28-split).
Two GPUs keep about twice as many cores busy: the loads ahead, their first calls and the correctness
checks of both devices. This reads the pace directly against the number of busy cores, in about a
minute, with nothing of the evaluator running:

    PYTHONPATH=. python3 benchmarks/host_pace_load.py --busy 0,2,4,8,16,28 --kind python --json $OUT/pace-python.json
    PYTHONPATH=. python3 benchmarks/host_pace_load.py --busy 0,2,4,8,16 --kind cuda --devices cuda:0,cuda:1 --json $OUT/pace-cuda.json

For each count, that many spinner processes run, each pinned to a core of its own (the spare cores
first, never the timed core): ``python`` spins on pure Python work; ``cuda`` launches a small kernel and
waits for it with ``torch.cuda.synchronize`` in a loop, as a loading worker's first call does (by default
the CUDA driver's wait spins its core), on the ``--devices`` in turn; ``cuda-blocking`` does the same with
the device's context set to block while it waits. Meanwhile this process, pinned to
cuda:0's timed core (cores.timed_core), reads the pace every 10 ms for ``--seconds``. Per count: the pace's
median and p90 (ms) and the median's ratio to the idle reading; the spinners' CPU share (each should be
near 1); the host's busy cores, steal share and clock (benchmarks/parent_load.host_summary). The idle
reading is taken first and again last, so a drift of the host's own speed shows as two idle readings
that differ. Standard library and the core only (and torch in the ``cuda`` spinners).
"""

from __future__ import annotations

import argparse
import json
import os
import select
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.parent_load import cpu_jiffies, cpu_mhz, host_summary  # noqa: E402
from cudal1.evaluator.contention import process_cpu_s, sample  # noqa: E402
from cudal1.evaluator.cores import set_affinity, spare_cores, timed_core  # noqa: E402
from cudal1.evaluator.pace import probe_ms  # noqa: E402
from cudal1.reports import percentile  # noqa: E402

SPIN = {
    "python": "import os, sys\nos.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True:\n    sum(range(1000))\n",
    "cuda": ("import os, sys, torch\nos.sched_setaffinity(0, {int(sys.argv[1])})\nx = torch.ones(1024, device=sys.argv[2])\n"
             "print('ready', flush=True)\nwhile True:\n    x.add_(1)\n    torch.cuda.synchronize(x.device)\n"),
}
# The same waits with the device's primary context set to block instead of spin (CU_CTX_SCHED_BLOCKING_SYNC,
# set through the driver before torch creates the context): if the CUDA spinners slow the timed core and
# these do not, untimed workers that block would leave two GPUs' host its speed.
SPIN["cuda-blocking"] = (
    "import ctypes, sys\ncuda = ctypes.CDLL('libcuda.so.1')\ndev = ctypes.c_int()\n"
    "assert cuda.cuInit(0) == 0 and cuda.cuDeviceGet(ctypes.byref(dev), int(sys.argv[2].split(':')[1])) == 0\n"
    "assert cuda.cuDevicePrimaryCtxSetFlags_v2(dev, 4) == 0\n" + SPIN["cuda"])


def spinner_cores(allowed: list[int], spare: list[int], timed: int | None, count: int) -> list[int]:
    """``count`` of the ``allowed`` cores for spinners: the ``spare`` ones first, never the timed core.

    >>> spinner_cores([0, 1, 2, 3, 4, 5], [0, 1, 2], 5, 4)
    [0, 1, 2, 3]
    """
    order = spare + [c for c in allowed if c not in spare]
    return [c for c in order if c != timed][:count]


def read_pace(seconds: float) -> tuple[list[float], list[tuple[dict, dict]]]:
    """The pace every 10 ms for ``seconds``, and the host's readings about every half second."""
    paces: list[float] = []
    host = [(cpu_jiffies(), cpu_mhz())]
    start = next_host = time.perf_counter()
    end = start + seconds
    while (now := time.perf_counter()) < end:
        paces.append(probe_ms())
        if now >= next_host + 0.5:
            host.append((cpu_jiffies(), cpu_mhz()))
            next_host = now
        time.sleep(0.01)
    host.append((cpu_jiffies(), cpu_mhz()))
    return paces, host


READY_S = 90.0  # a CUDA spinner's start (import torch, its context) beside up to 30 others starting


def wait_ready(procs: list[subprocess.Popen], seconds: float) -> None:
    """Until each CUDA spinner has said it spins, or has exited, or ``seconds`` have passed: a spinner
    that hangs in its start must not hang the run (it then counts as not alive only if it exited)."""
    deadline = time.monotonic() + seconds
    for p in procs:
        if p.stdout is None:
            continue
        ready, _, _ = select.select([p.stdout], [], [], max(0.0, deadline - time.monotonic()))
        if ready:
            p.stdout.readline()


def paired(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each busy count's pace over the mean of the idle readings right before and after it, by count: with
    the counts alternating with idle readings, the host's own drift (which moves the idle pace by 1.5x in
    a minute) cancels out of each ratio.

    >>> rows = [{"busy": b, "pace_ms": {"median": m}} for b, m in [(0, 1.0), (4, 1.2), (0, 1.4), (4, 1.3)]]
    >>> paired(rows)
    {'4': {'pairs': 1, 'median': 1.0, 'ratios': [1.0]}}
    """
    out: dict[str, list[float]] = {}
    for i in range(1, len(rows) - 1):
        before, row, after = rows[i - 1], rows[i], rows[i + 1]
        if row["busy"] and not before["busy"] and not after["busy"]:
            idle = (before["pace_ms"]["median"] + after["pace_ms"]["median"]) / 2
            out.setdefault(str(row["busy"]), []).append(round(row["pace_ms"]["median"] / idle, 3))
    return {k: {"pairs": len(v), "median": round(statistics.median(v), 3), "ratios": v} for k, v in out.items()}


def one_count(cores: list[int], kind: str, devices: list[str], timed: int | None, seconds: float) -> dict[str, Any]:
    """The pace with a spinner on each of ``cores``, and what they and the host did meanwhile."""
    procs = [subprocess.Popen([sys.executable, "-c", SPIN[kind], str(core), devices[i % len(devices)]],
                              stdout=subprocess.PIPE if kind.startswith("cuda") else subprocess.DEVNULL)
             for i, core in enumerate(cores)]
    try:
        if kind.startswith("cuda"):
            wait_ready(procs, READY_S)
        time.sleep(0.3)
        before, t0 = [sample(p.pid) for p in procs], time.perf_counter()
        paces, host = read_pace(seconds)
        wall = time.perf_counter() - t0
        shares = [process_cpu_s(b, sample(p.pid)) / wall for p, b in zip(procs, before)]
        alive = sum(p.poll() is None for p in procs)  # a spinner that failed to start spins nothing
    finally:
        for p in procs:
            p.kill()
            p.wait()
    return {"busy": len(cores), "cores": cores, "alive": alive, "readings": len(paces),
            "pace_ms": {"median": round(statistics.median(paces), 4), "p90": round(percentile(paces, 90), 4)},
            "paces": [round(x, 4) for x in paces],
            "spinner_cpu_share": round(statistics.fmean(shares), 3) if shares else None,
            "host": host_summary(host, [timed] if timed is not None else [])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--busy", default="0,2,4,8,16", help="comma-separated counts of busy cores (0 is the idle reading)")
    ap.add_argument("--kind", choices=sorted(SPIN), default="python")
    ap.add_argument("--devices", default="cuda:0", help="with --kind cuda: the devices the spinners wait on, in turn")
    ap.add_argument("--seconds", type=float, default=4.0, help="pace readings per count")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    counts = [int(c) for c in args.busy.split(",")]
    allowed = sorted(os.sched_getaffinity(0))  # read before this process pins itself to one of them
    spare = sorted(spare_cores() or [])
    timed = timed_core("cuda:0")
    if timed is None:  # a CPU machine, or too few cores: the last allowed core stands in for it
        timed = allowed[-1]
    set_affinity(timed)
    out: dict[str, Any] = {"kind": args.kind, "timed_core": timed, "cpu_count": os.cpu_count(),
                           "seconds": args.seconds, "rows": []}
    for count in counts + [0]:  # each row printed and written as it is read: a run stopped from outside keeps them
        row = one_count(spinner_cores(allowed, spare, timed, count), args.kind, args.devices.split(","), timed,
                        args.seconds)
        out["rows"].append(row)
        row["pace_over_idle"] = round(row["pace_ms"]["median"] / out["rows"][0]["pace_ms"]["median"], 3)
        busy = row["host"].get("busy_cores", {}).get("mean")
        print(f"busy {row['busy']:>3} ({row['alive']} alive; host {busy}): pace {row['pace_ms']['median']:.4f} ms "
              f"({row['pace_over_idle']:.3f}x idle), spinners at {row['spinner_cpu_share']} of a core, "
              f"clock {row['host'].get('mhz_median')} MHz, steal {row['host'].get('steal_share')}", flush=True)
        out["paired"] = paired(out["rows"])
        if args.json:
            args.json.write_text(json.dumps(out, indent=1) + "\n")
    for count, pair in out["paired"].items():
        print(f"busy {count:>3} over the idle readings around it: median {pair['median']} ({pair['ratios']})")

if __name__ == "__main__":
    main()
