"""What a warm build cache still costs a program that builds an inline extension. In the whole-release
runs on a warm cache (docs/gpu-runs.md#2026-11-27-two-gpu-release) a worker's load of a program that
calls ``load_inline`` took a median 1.30 s against 0.36 s for one that does not (71 and 131 programs),
though nothing was compiled; on the CPU machine the same difference is 0.07 s. This builds one small
extension of our own (a CUDA kernel on a GPU, C++ on a CPU) into a fresh folder, then loads it again in
fresh processes, as a worker does after its CUDA context exists, and splits each load into torch's steps
(``import torch.utils.cpp_extension``, ``load_inline``, and inside it the ninja check, the compiler
probe and the module's import), with the calls that took longest under cProfile; and what ninja ran in
each warm load (new lines of the folder's ``.ninja_log``: a warm load should run nothing). ``--worker-env``
gives each load a worker's PATH (the fail-fast ninja first, failfast.first_on_path) and the precompiled
header's CPATH (pch.prepare into the same folder's root), as a batch's workers have them.

    PYTHONPATH=. python3 benchmarks/inline_load.py --loads 3 --json $OUT/inline-load.json

Our own source only; no candidate runs here.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CUDA_SOURCE = """
__global__ void add_one_kernel(const float* x, float* y, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] + 1.0f;
}
torch::Tensor add_one(torch::Tensor x) {
    auto y = torch::empty_like(x);
    long n = x.numel();
    add_one_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""
CPP_DECL = "torch::Tensor add_one(torch::Tensor x);"
CPP_SOURCE = "torch::Tensor add_one(torch::Tensor x) { return x + 1; }"

# One load, in a fresh interpreter: the steps' walls and cProfile's longest calls (by cumulative time).
CHILD = r"""
import cProfile, io, json, pstats, sys, time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
cuda = sys.argv[2] == "cuda"
if cuda:
    torch.zeros(1, device="cuda")  # a worker's context exists before the program is imported
t2 = time.perf_counter()
import torch.utils.cpp_extension as cpp
t3 = time.perf_counter()
kwargs = json.loads(sys.argv[3])
profile = cProfile.Profile()
profile.enable()
module = cpp.load_inline(build_directory=sys.argv[1], **kwargs)
profile.disable()
t4 = time.perf_counter()
x = torch.ones(4, device="cuda" if cuda else "cpu")
assert module.add_one(x).sum().item() == 8.0
out = io.StringIO()
pstats.Stats(profile, stream=out).sort_stats("cumulative").print_stats(25)
print(json.dumps({"import_torch_s": round(t1 - t0, 3), "context_s": round(t2 - t1, 3),
                  "import_cpp_extension_s": round(t3 - t2, 3), "load_inline_s": round(t4 - t3, 3),
                  "profile": out.getvalue()}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--loads", type=int, default=3, help="warm loads, each in a fresh process")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="")
    ap.add_argument("--worker-env", action="store_true", help="the fail-fast ninja and the precompiled header")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    kwargs = {"name": "cudal1_inline_load", "cpp_sources": CPP_DECL if device == "cuda" else CPP_SOURCE,
              "functions": ["add_one"]}
    if device == "cuda":
        kwargs["cuda_sources"] = CUDA_SOURCE
    root = Path(tempfile.mkdtemp(prefix="cudal1-inline-load-"))
    folder = root / "ext"
    folder.mkdir()
    env = dict(os.environ)
    if args.worker_env:
        from cudal1.evaluator import failfast, pch

        env["PATH"] = failfast.first_on_path(env.get("PATH")) or ""
        print("precompiled header:", pch.prepare(root), flush=True)
        env["CPATH"] = pch.cpath(root, env.get("CPATH"))
    ninja_log = folder / ".ninja_log"
    runs = []
    for i in range(args.loads + 1):  # the first builds; the others find it built
        before = ninja_log.read_text().splitlines() if ninja_log.exists() else []
        t = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", CHILD, str(folder), device, json.dumps(kwargs)],
                              capture_output=True, text=True, timeout=900, env=env)
        if proc.returncode != 0:
            sys.exit(f"inline_load.py: load {i} failed:\n{proc.stderr[-4000:]}")
        after = ninja_log.read_text().splitlines() if ninja_log.exists() else []
        run = json.loads(proc.stdout.strip().splitlines()[-1]) | {"process_s": round(time.perf_counter() - t, 3),
                                                                  "cold": i == 0, "ninja_ran": after[len(before):]}
        runs.append(run)
        print({k: v for k, v in run.items() if k != "profile"}, flush=True)
    print(runs[-1]["profile"])
    if args.json is not None:
        args.json.write_text(json.dumps({"device": device, "torch": torch.__version__, "loads": runs}, indent=1))


if __name__ == "__main__":
    main()
