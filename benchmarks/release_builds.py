"""Compile the CUDA extensions of chosen release rows on this machine and report the compiler's first
error next to what cudal1/evaluator/bindings.py reads from the source. Nothing of the programs runs:
each row's load_inline arguments are read statically (literal sources only) and handed to torch's
builder in a child process with a time limit. Needs nvcc (CUDA_HOME, default /usr/local/cuda); runs on
a CPU machine, where every object is compiled and only the link against torch's CUDA libraries (absent
from the CPU wheel) cannot happen: a row whose objects compile is reported as "compiles".

    python benchmarks/release_builds.py --release ../shared/cuda-l1/h100.jsonl \
        --results docs/reproduction/h100-results.jsonl --out /tmp/release-builds.csv [--rows L1-12,L1-42]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cudal1.candidates import load_evaluations  # noqa: E402
from cudal1.evaluator.bindings import binding_problems, literal_builds  # noqa: E402
from cudal1.evaluator.extensions import error_lines  # noqa: E402
from cudal1.problems import load_cudal1_release  # noqa: E402

# Run in a child: a CPU torch has no CUDA_HOME of its own, so it is set before the builder is used.
# The CPU wheel lacks one generated header of c10/cuda (its whole content is this define) and the CUDA
# libraries to link against: the stub stands in for the header, and a failure to link is reported as
# "compiles".
_CHILD = """
import json, os, sys
import torch.utils.cpp_extension as ext
ext.CUDA_HOME = sys.argv[2]
spec = json.load(open(sys.argv[1]))
stub = os.path.join(sys.argv[3], "stub")
os.makedirs(os.path.join(stub, "c10", "cuda", "impl"))
with open(os.path.join(stub, "c10", "cuda", "impl", "cuda_cmake_macros.h"), "w") as f:
    f.write("#pragma once\\n#define C10_CUDA_BUILD_SHARED_LIBS\\n")
kwargs = {k: v for k, v in spec.items() if v is not None and k != "name"}
if "cuda_sources" in kwargs:
    kwargs["with_cuda"] = True
try:
    ext.load_inline(spec["name"] or "cudal1_release_build", build_directory=sys.argv[3], verbose=False,
                    extra_include_paths=[stub], **kwargs)
except Exception as exc:
    text = str(exc)
    linking = "cannot find -l" in text or "undefined symbol" in text or isinstance(exc, ImportError)
    print("compiles (linking needs a CUDA build of torch)" if linking else "FAILED " + text)
else:
    print("compiles")
"""


def compile_row(spec: dict, cuda_home: str, timeout_s: int) -> str:
    with tempfile.TemporaryDirectory(prefix="cudal1-release-build-") as tmp:
        (Path(tmp) / "spec.json").write_text(json.dumps(spec))
        build = Path(tmp) / "build"
        build.mkdir()
        try:
            done = subprocess.run([sys.executable, "-c", _CHILD, str(Path(tmp) / "spec.json"), cuda_home, str(build)],
                                  capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return f"timed out after {timeout_s} s"
    out = done.stdout.strip()
    if out.startswith("FAILED "):
        # The first error of each translation unit: main.cpp (the C++ sources and torch's bindings) and
        # cuda.cu fail independently, and ninja reports both.
        lines = [ln for ln in error_lines(out[7:], limit=20000).split(" | ") if not ln.startswith("Error building")]
        first: dict[str, str] = {}
        for line in lines:
            unit = "main.cpp" if "main.cpp" in line else "cuda.cu" if "cuda.cu" in line else "other"
            first.setdefault(unit, line[:220])  # error_lines already cut build paths
        return " || ".join(first.values()) if first else out[-300:]
    return out or done.stderr.strip()[-300:]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--release", required=True, type=Path)
    ap.add_argument("--results", type=Path, help="a run's results.jsonl: its rows flagged extension_build_failed")
    ap.add_argument("--rows", default="", help="comma-separated problem ids instead")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--arch", default="9.0", help="TORCH_CUDA_ARCH_LIST (9.0: H100)")
    ap.add_argument("--timeout", type=int, default=900)
    args = ap.parse_args()
    if args.rows:
        wanted = args.rows.split(",")
    elif args.results:
        wanted = [e.problem_id for e in load_evaluations(args.results) if "extension_build_failed" in e.flags]
    else:
        sys.exit("--results or --rows: which rows to build")
    sources = {r.problem.problem_id: r.candidate_source or "" for r in load_cudal1_release(args.release)}
    os.environ["TORCH_CUDA_ARCH_LIST"] = args.arch
    cuda_home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    with args.out.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["problem_id", "static_reason", "compiler"])
        writer.writeheader()
        for k, pid in enumerate(wanted, 1):
            builds = [b for b in literal_builds(sources.get(pid, "")) if b.cpp_sources is not None]
            verdict = compile_row(asdict(builds[0]), cuda_home, args.timeout) if builds else "no literal load_inline"
            row = {"problem_id": pid, "static_reason": "; ".join(binding_problems(sources.get(pid, ""))),
                   "compiler": verdict}
            writer.writerow(row)
            handle.flush()
            print(f"[{k}/{len(wanted)}] {pid}: {verdict[:150]}", flush=True)


if __name__ == "__main__":
    main()
