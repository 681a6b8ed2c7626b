"""Where one release program's CUDA build goes: nvcc's phases (``nvcc -time``) for the CUDA file torch writes
for a ``load_inline`` program, compiled as torch's build compiles it (its include paths and
``COMMON_NVCC_FLAGS``, one target), and with ``--device-trace`` the device front end's own split
(``-fdevice-time-trace``). Runs wherever nvcc is, a CPU machine included (nothing built is run):

    python benchmarks/nvcc_phases.py --release ../shared/cuda-l1/h100.jsonl --row L1-32 [--device-trace] \
        [--json out.json]

Only programs that give ``load_inline`` their CUDA source as one module-level triple-quoted string are
taken apart here; others are refused by name.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from torch.utils import cpp_extension

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cudal1.problems import load_cudal1_release  # noqa: E402

# What torch's load_inline puts before a program's CUDA source (cpp_extension._write_... for cuda_sources)
# The device compile's trace events that nest nothing above them (-fdevice-time-trace)
TOP_LEVEL = ("CUDA C++ Front-End", "Generating NVVM IR", "LibNVVM")
PRELUDE = "#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n"


def cuda_source(program: str) -> str:
    """The program's CUDA source: the module-level string whose text defines a __global__ kernel."""
    for m in re.finditer(r'^\w+\s*=\s*(?:r?"""(.*?)"""|r?\'\'\'(.*?)\'\'\')', program, re.S | re.M):
        text = m.group(1) or m.group(2) or ""
        if "__global__" in text:
            return text
    raise SystemExit("no module-level triple-quoted CUDA source with a __global__ kernel in this program")


def nvcc_phases(source: str, arch: str, device_trace: bool) -> dict:
    """nvcc's own per-phase times (ms) for the file, and the device front end's split when asked."""
    flags = [a for p in cpp_extension.include_paths() for a in ("-isystem", p)]  # nvcc adds its own CUDA headers
    flags += ["-isystem", sysconfig.get_paths()["include"], "-DTORCH_EXTENSION_NAME=probe",
              "-DTORCH_API_INCLUDE_EXTENSION_H", *cpp_extension.COMMON_NVCC_FLAGS,
              f"-gencode=arch=compute_{arch},code=sm_{arch}", "--compiler-options", "-fPIC", "-std=c++17"]
    with tempfile.TemporaryDirectory() as tmp:
        cu, times = Path(tmp) / "probe.cu", Path(tmp) / "times.csv"
        cu.write_text(PRELUDE + source)
        t0 = time.perf_counter()
        # A program whose build fails (most of the release's, docs/benchmarks/release-h100.md) still has
        # its phases up to the failure timed: reported with compiled false
        done = subprocess.run(["nvcc", *flags, "-time", str(times), "-c", str(cu), "-o", str(Path(tmp) / "probe.o")],
                              cwd=tmp, capture_output=True, text=True)
        report: dict = {"compiled": done.returncode == 0, "wall_s": round(time.perf_counter() - t0, 1), "phases_s": {}}
        if done.returncode:
            report["error"] = next((line for line in (done.stdout + done.stderr).splitlines() if "error" in line), "")[:200]
        for row in csv.reader(times.read_text().splitlines()[1:]):
            if len(row) >= 8 and row[1].strip():
                name = row[1].strip()
                report["phases_s"][name] = round(report["phases_s"].get(name, 0.0) + float(row[6]) / 1e3, 2)
        if device_trace and done.returncode == 0:
            trace = Path(tmp) / "trace"
            subprocess.run(["nvcc", *flags, "-fdevice-time-trace", str(trace), "-ptx", str(cu),
                            "-o", str(Path(tmp) / "probe.ptx")], check=True, cwd=tmp)
            found = next(Path(tmp).glob("trace*"))
            events = json.loads(found.read_text())
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
    report |= nvcc_phases(cuda_source(rows[args.row].candidate_source), args.arch, args.device_trace)
    print(json.dumps(report, indent=1))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
