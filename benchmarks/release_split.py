"""The release on several GPUs with one evaluating process per GPU, instead of one process driving every
GPU from threads of one interpreter (`release_eval.py --devices cuda:0,cuda:1`).

On the whole release on one 2x H200 host the rows took 1.20x as long summed over two GPUs as on one, and
the pair read 1.684x; the extra is in the phases the evaluating process drives (docs/gpu-runs.md
#2026-11-28-two-gpu-whole). Run beside `release_eval.py` on both GPUs on the same host, this tells
whether one interpreter for both devices is what costs it: here each GPU has its own process, its own
fork server and its own interpreter lock, and nothing else differs. The rows are split before the start,
largest first onto the GPU with the least expected work (the costs of an earlier run, as the batch hands
them out), since separate processes cannot take rows from one queue.

On one 2x H200 host it did not help: the rows summed 547.5 s against 557.5 s from one process (0.98x),
each process used 13% of a core, and the fixed split balanced the GPUs worse than the shared queue
(325.0 s against 306.8 s). What two GPUs slow is the host's own pace, in either layout
(docs/gpu-runs.md#2026-11-28-split).

    PYTHONPATH=. python3 benchmarks/release_split.py --release carry/h100.jsonl --devices cuda:0,cuda:1 \\
        --costs-from docs/benchmarks/idle-device-h200/cold/results.jsonl --out RUN [--limit-s 540]

Each GPU's run goes to RUN/<i>-<device>/ (resumable: a second invocation goes on where the first stopped);
RUN/results.jsonl holds them all and RUN/calls.jsonl this invocation's wall, as
benchmarks/release_resume.sh writes it, so `release_bench.py --two-gpu RUN` reads the run as one whose
wall is the sum of its calls. Extra arguments after ``--`` go to every release_eval.py.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cudal1.candidates import load_evaluations  # noqa: E402
from cudal1.evaluator.schedule import expected_costs  # noqa: E402
from cudal1.problems import load_cudal1_release  # noqa: E402

HERE = Path(__file__).resolve().parent


def split_rows(rows: list[str], costs: dict[str, float], parts: int) -> list[list[str]]:
    """Rows onto ``parts`` devices, largest expected cost first, each onto the device with the least so
    far (a row without a cost counts as the median of those with one); each device's rows keep that order.

    >>> split_rows(["a", "b", "c", "d"], {"a": 1.0, "b": 5.0, "c": 3.0, "d": 2.0}, 2)
    [['b', 'a'], ['c', 'd']]
    """
    typical = sorted(costs.values())[len(costs) // 2] if costs else 1.0
    loads, out = [0.0] * parts, [[] for _ in range(parts)]  # type: ignore[var-annotated]
    for pid in sorted(rows, key=lambda p: -costs.get(p, typical)):
        i = loads.index(min(loads))
        out[i].append(pid)
        loads[i] += costs.get(pid, typical)
    return out


def folder(out: Path, index: int, device: str) -> Path:
    """One device's run: by its place in --devices too, so that ``cpu,cpu`` gives two folders."""
    return out / f"{index}-{device.replace(':', '_')}"


def merge(out: Path, devices: list[str]) -> int:
    """Every device's results into ``out/results.jsonl`` (each line as its run wrote it); their count."""
    lines = []
    for i, device in enumerate(devices):
        path = folder(out, i, device) / "results.jsonl"
        if path.exists():
            lines += [line for line in path.read_text().splitlines() if line.strip()]
    (out / "results.jsonl").write_text("".join(line + "\n" for line in lines))
    return len(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--release", required=True, type=Path)
    ap.add_argument("--devices", default="cuda:0,cuda:1")
    ap.add_argument("--costs-from", required=True, type=Path, help="an earlier run's results.jsonl")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--rows", default="", help="comma-separated problem ids to split (default: every row with a program)")
    ap.add_argument("--limit-s", type=float, default=0, help="stop every device's run after this many seconds")
    ap.add_argument("rest", nargs="*", help="after --: more arguments for every release_eval.py")
    args = ap.parse_args()
    devices = args.devices.split(",")
    rows = [r.problem.problem_id for r in load_cudal1_release(args.release) if r.candidate_source]
    if args.rows:
        wanted = set(args.rows.split(","))
        rows = [pid for pid in rows if pid in wanted]
    parts = split_rows(rows, expected_costs(load_evaluations(args.costs_from)), len(devices))
    args.out.mkdir(parents=True, exist_ok=True)
    before = len(load_evaluations(args.out / "results.jsonl")) if (args.out / "results.jsonl").exists() else 0
    env = os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, [str(HERE.parent), os.environ.get("PYTHONPATH")]))}
    started = time.perf_counter()
    procs = []
    for i, (device, mine) in enumerate(zip(devices, parts)):
        mine_out = folder(args.out, i, device)
        mine_out.mkdir(exist_ok=True)
        cmd = [sys.executable, str(HERE / "release_eval.py"), "--release", str(args.release), "--devices", device,
               "--rows", ",".join(mine), "--out", str(mine_out), "--costs-from", str(args.costs_from), *args.rest]
        if args.limit_s:
            cmd = ["timeout", str(int(args.limit_s)), *cmd]
        with open(mine_out / "run.log", "a") as log:
            procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env))
    codes = [p.wait() for p in procs]
    wall = time.perf_counter() - started
    after = merge(args.out, devices)
    call = {"wall_s": round(wall, 1), "evaluations_before": before, "evaluations_after": after,
            "stopped_by_limit": 124 in codes, "devices": devices, "rows": [len(p) for p in parts], "codes": codes}
    with open(args.out / "calls.jsonl", "a") as calls:
        calls.write(json.dumps(call) + "\n")
    print(json.dumps(call))
    if any(c not in (0, 124) for c in codes):
        raise SystemExit(f"a device's run failed (exit codes {codes}): see {args.out}/<i>-<device>/run.log")


if __name__ == "__main__":
    main()
