"""Where one release program's CUDA build goes: nvcc's phases (``nvcc -time``, seconds) for the CUDA file
torch writes for the program's own ``load_inline`` call, compiled with the command torch's ``build.ninja``
gives it (one target, ``--arch``), and with ``--device-trace`` the device front end's own split
(``-fdevice-time-trace``). The call is recorded, not run (benchmarks/pch_builds.py), and torch writes the
build's files as it would for the program (cudal1.evaluator.pch.ninja_file). Runs wherever nvcc is, a CPU
machine included (nothing built is run):

    python benchmarks/nvcc_phases.py --release ../shared/cuda-l1/h100.jsonl --row L1-32 [--device-trace] \
        [--json out.json]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch.utils.cpp_extension as cpp  # noqa: E402
from pch_builds import recorded_builds  # noqa: E402  the program's load_inline calls, recorded not run

from cudal1.evaluator.pch import ninja_file  # noqa: E402
from cudal1.problems import load_cudal1_release  # noqa: E402

# The device compile's trace events that nest nothing above them (-fdevice-time-trace)
TOP_LEVEL = ("CUDA C++ Front-End", "Generating NVVM IR", "LibNVVM")


def cuda_build(program: str) -> dict[str, Any]:
    """The program's first ``load_inline`` call that compiles CUDA, with its arguments as the program gives them."""
    for call in recorded_builds(program):
        if call.get("cuda_sources"):
            return call
    raise SystemExit("no load_inline call with cuda_sources in this program (on import or construction)")


def nvcc_phases(call: dict[str, Any], device_trace: bool) -> dict:
    """nvcc's own per-phase times (s) for the call's CUDA file, and the device front end's split when asked."""
    with tempfile.TemporaryDirectory() as tmp:
        build = Path(tmp)
        ninja = ninja_file(build, **(call | {"name": "probe"}))  # torch writes cuda.cu and its command
        command = [*shlex.split(ninja["nvcc"]), *shlex.split(ninja["cuda_cflags"]), "-c", "cuda.cu",
                   *shlex.split(ninja.get("cuda_post_cflags", ""))]
        t0 = time.perf_counter()
        # A program whose build fails (most of the release's, docs/benchmarks/release-h100.md) still has
        # its phases up to the failure timed: reported with compiled false
        done = subprocess.run([*command, "-o", "cuda.o", "-time", "times.csv"], cwd=build, capture_output=True, text=True)
        report: dict = {"compiled": done.returncode == 0, "wall_s": round(time.perf_counter() - t0, 1), "phases_s": {}}
        if done.returncode:
            report["error"] = next((line for line in (done.stdout + done.stderr).splitlines() if "error" in line), "")[:200]
        for row in csv.reader((build / "times.csv").read_text().splitlines()[1:]):
            if len(row) >= 8 and row[1].strip():
                name = row[1].strip()
                report["phases_s"][name] = round(report["phases_s"].get(name, 0.0) + float(row[6]) / 1e3, 2)
        if device_trace and done.returncode == 0:
            subprocess.run([*command, "-ptx", "-o", "cuda.ptx", "-fdevice-time-trace", "trace"], check=True, cwd=build)
            events = json.loads(next(build.glob("trace*")).read_text())
            events = events["traceEvents"] if isinstance(events, dict) else events
            split: dict[str, float] = {}
            for e in events:
                if e.get("ph") == "X":
                    split[e["name"]] = split.get(e["name"], 0.0) + e["dur"] / 1e6
            # The trace nests (headers inside the front end); these are its top level: front end against back end
            report["device_trace_s"] = {k: round(split.get(k, 0.0), 2) for k in TOP_LEVEL}
    return report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--release", type=Path, required=True, help="a CUDA-L1 release JSONL")
    ap.add_argument("--row", required=True, help="a problem id, e.g. L1-32")
    ap.add_argument("--arch", default="90", help="the one target built (90: H100)")
    ap.add_argument("--device-trace", action="store_true", help="also the device front end's own time trace")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rows = {r.problem.problem_id: r for r in load_cudal1_release(args.release)}
    if args.row not in rows or not rows[args.row].candidate_source:
        raise SystemExit(f"{args.row}: no program of that id in {args.release}")
    report = {"row": args.row, "arch": args.arch, "date": time.strftime("%Y-%m-%d"),
              "nvcc": subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]}
    if cpp.CUDA_HOME is None:  # a CPU torch: the CUDA files compile here all the same (nvcc is installed)
        cpp.CUDA_HOME = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    os.environ["TORCH_CUDA_ARCH_LIST"] = f"{args.arch[:-1]}.{args.arch[-1]}"  # one target, as a pinned batch builds
    report |= nvcc_phases(cuda_build(rows[args.row].candidate_source), args.device_trace)
    print(json.dumps(report, indent=1))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
