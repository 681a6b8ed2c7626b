"""What the precompiled torch header (cudal1.evaluator.pch) saves a release's extension builds.

For a sample of a CUDA-L1 release's programs that build with ``load_inline``: each program is executed
with its ``load_inline`` calls recorded, not run (and ``torch.cuda.is_available`` answering True, so a CPU
host records what a GPU host would build); torch then writes each build's ninja file as it would for the
program. The ``main.cpp`` of each build is compiled with its exact command, once as usual and once with
the header found through CPATH, as a worker's builds find it. The first ``--full`` programs are also built
whole (ninja: ``main.cpp`` and the CUDA file) as a worker built them before (torch's header parsed, ninja
waiting for every compile) and as it builds them now (the header precompiled, and ninja stopped at the
first failed compile: cudal1.evaluator.failfast). One compile at
a time: seconds are one core's, on an otherwise idle host.

    PYTHONPATH=. python benchmarks/pch_builds.py --release ../shared/cuda-l1/h100.jsonl --every 6 \
        --full 2 --json docs/benchmarks/pch-builds-cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.utils.cpp_extension as cpp  # noqa: E402

from cudal1.evaluator.failfast import first_on_path, shim_dir  # noqa: E402
from cudal1.evaluator.pch import HEADER, cpath, ninja_file, prepare  # noqa: E402
from cudal1.problems import load_cudal1_release  # noqa: E402


def recorded_builds(source: str) -> list[dict[str, Any]]:
    """The load_inline calls a program makes on import and construction, recorded instead of run."""
    calls: list[dict[str, Any]] = []

    def record(*args: Any, **kwargs: Any) -> None:
        names = ("name", "cpp_sources", "cuda_sources", "functions")
        calls.append(dict(zip(names, args)) | kwargs)
        raise RuntimeError("recorded")  # the program takes its fallback, as after a failed build

    real, available = cpp.load_inline, torch.cuda.is_available
    cpp.load_inline, torch.cuda.is_available = record, lambda: True
    try:
        space: dict[str, Any] = {"__name__": "candidate"}
        exec(compile(source, "candidate.py", "exec"), space)  # noqa: S102 - the release's own programs
        if "ModelNew" in space and "get_init_inputs" in space:
            space["ModelNew"](*space["get_init_inputs"]())
    except Exception:  # noqa: BLE001 - a program that cannot go further on this host has recorded what it could
        pass
    finally:
        cpp.load_inline, torch.cuda.is_available = real, available
    return calls


def _main_cpp_command(variables: dict[str, str]) -> list[str]:
    """torch's compile of the build's main.cpp, with -H: prints its exit status, then 1 where GCC loaded a
    precompiled header ("! <file>.gch"), else 0."""
    return ["sh", "-c", f"{variables.get('cxx', 'c++')} {variables['cflags']} -H -c main.cpp -o main.o "
            f"{variables.get('post_cflags', '')} 2> headers.txt; echo $?; grep -c '^! .*gch' headers.txt"]


def timed(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float, str]:
    """Wall and CPU seconds (children's user + system) of a command, and its output."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return round(wall, 2), round(cpu, 2), (done.stdout + done.stderr).strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--release", required=True, type=Path)
    ap.add_argument("--every", type=int, default=5, help="every n-th program that builds on import or construction")
    ap.add_argument("--full", type=int, default=0, help="programs of the sample built whole, before and now")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if cpp.CUDA_HOME is None:  # a CPU torch: the CUDA files compile here all the same (nvcc is installed)
        cpp.CUDA_HOME = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")
    rows = [r for r in load_cudal1_release(args.release) if "load_inline" in (r.candidate_source or "")]
    # programs that build on import or construction (the others build on their first call on a GPU)
    builds = [(r.problem.problem_id, calls) for r in rows if (calls := recorded_builds(r.candidate_source or ""))]
    sample = builds[::args.every]
    print(f"{len(builds)} of {len(rows)} load_inline programs build on import or construction; "
          f"{len(sample)} sampled", flush=True)
    root = Path(tempfile.mkdtemp(prefix="cudal1-pch-bench-"))
    t0 = time.perf_counter()
    prepared = prepare(root)
    header_s = round(time.perf_counter() - t0, 1)
    print(f"header: {prepared} ({header_s} s)", flush=True)
    plain = {k: v for k, v in os.environ.items() if k != "CPATH"}
    with_header = plain | {"CPATH": cpath(root)}
    if shim_dir() is None:
        sys.exit("the fail-fast ninja cannot run here (see cudal1.evaluator.failfast.shim_dir)")
    now = with_header | {"PATH": first_on_path(plain.get("PATH"))}
    results: list[dict[str, Any]] = []
    try:
        for i, (pid, calls) in enumerate(sample):
            build = root / f"b-{pid}"
            call = {k: v for k, v in calls[0].items() if k != "build_directory"} | {"verbose": False}
            variables = ninja_file(build, **call)  # sources and build.ninja written, nothing compiled
            entry: dict[str, Any] = {"problem": pid}
            for mode, env in (("without", plain), ("with", with_header)):
                wall, cpu, out = timed(_main_cpp_command(variables), build, env)
                status, used = out.split()[-2:]
                entry[f"main_cpp_{mode}_s"], entry[f"main_cpp_{mode}_used_header"] = wall, used == "1"
                entry["main_cpp_compiles"] = status == "0"  # many released programs' builds fail (they fall back)
            if i < args.full and (build / "cuda.cu").exists():
                # whole, as a worker built it before (torch's header parsed, ninja waits for every compile)
                # and as it builds now (the header precompiled, ninja stopped at a failed compile)
                for mode, env in (("before", plain), ("now", now)):
                    for stale in ("main.o", "cuda.cuda.o", ".ninja_log", ".ninja_deps"):
                        (build / stale).unlink(missing_ok=True)
                    wall, cpu, out = timed(["ninja", "-v", "-j", "2"], build, env)
                    entry[f"build_{mode}_wall_s"], entry[f"build_{mode}_cpu_s"] = wall, cpu
                    entry[f"build_{mode}_ok"] = "FAILED: " not in out
            results.append(entry)
            print(json.dumps(entry), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    # Paired, over every sampled program: a build whose main.cpp fails (many released programs bind a
    # function their C++ never declares, and fall back) pays its compile up to the error all the same.
    used = [r for r in results if r["main_cpp_with_used_header"]]
    full = [r for r in results if "build_now_cpu_s" in r]
    summary = {"date": time.strftime("%Y-%m-%d"), "host": platform.node(), "cpu_count": os.cpu_count(),
               "compiler": subprocess.run(["c++", "--version"], capture_output=True, text=True).stdout.splitlines()[0],
               "torch": torch.__version__, "header": str(HEADER), "header_compile_s": header_s,
               "programs": len(results), "main_cpp_compiles": sum(r["main_cpp_compiles"] for r in results),
               "header_used": len(used),
               "main_cpp_sum_without_s": round(sum(r["main_cpp_without_s"] for r in results), 1),
               "main_cpp_sum_with_s": round(sum(r["main_cpp_with_s"] for r in results), 1),
               "main_cpp_saved_median_s": statistics.median(r["main_cpp_without_s"] - r["main_cpp_with_s"]
                                                            for r in used) if used else None,
               "full_builds": len(full),
               "full_build_cpu_s_sum": {m: round(sum(r[f"build_{m}_cpu_s"] for r in full), 1) for m in ("before", "now")},
               "full_build_wall_s_sum": {m: round(sum(r[f"build_{m}_wall_s"] for r in full), 1) for m in ("before", "now")},
               "full_builds_ok": {m: sum(r[f"build_{m}_ok"] for r in full) for m in ("before", "now")},
               "command": " ".join(sys.argv)}
    print("summary", json.dumps(summary), flush=True)
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "programs": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
