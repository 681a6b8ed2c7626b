"""Where a candidate worker's load goes, function by function, on the GPU machine.

A batch's device waits for the loads ahead (docs/benchmarks/release-h100.md, "A candidate's load is the
harness's work"); their records (``extra.prep_s``) split a load into the reference's import, the inputs
plan, the harness's draws and the input graph, and leave the rest to the program's import and, for a
program that builds an extension, the wrapping of torch's builder. This profiles those parts in fresh
processes, each as a worker has it (torch imported, the CUDA context and the harness's kernels up):

- ``load``: one release row's load of its program (rows whose program builds nothing), under cProfile;
- ``builder``: ``import torch.utils.cpp_extension`` after the CUDA context, as a building program's load
  makes it, with ``-X importtime``'s slowest modules.

    PYTHONPATH=. python3 benchmarks/load_profile.py --release carry/h100.jsonl --rows L1-1,L2-9 --json OUT/p.json
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def child_load(reference: str, candidate: str, draws: str | None) -> dict[str, Any]:
    """One load in this (fresh) process, profiled; its reply's prep_s and the slowest functions."""
    import torch

    from cudal1.evaluator.probes import warm_kernels
    from cudal1.evaluator.worker import Worker

    worker = Worker(os.environ.get("LOAD_PROFILE_DEVICE", "cuda:0"), 1, True)
    warm_kernels(worker.device)
    msg = {"cmd": "load", "role": "candidate", "reference_path": reference, "candidate_path": candidate,
           "init_seed": 1, "module_file": None, "graph_inputs": worker.device.type == "cuda", "device_draws": draws, "build_only": False}
    profile = cProfile.Profile()
    t0 = time.perf_counter()
    profile.enable()
    reply = worker.load(msg)
    profile.disable()
    wall = time.perf_counter() - t0
    if worker.device.type == "cuda":
        torch.cuda.synchronize()
    stats = pstats.Stats(profile)
    top = sorted(((v[3], f"{Path(k[0]).name}:{k[1]}:{k[2]}") for k, v in stats.stats.items()),  # type: ignore[attr-defined]
                 reverse=True)
    return {"wall_s": round(wall, 3), "ok": reply.get("ok"), "prep_s": reply.get("prep_s"),
            "import_s": reply.get("import_s"), "build_s": round(reply.get("build_s", 0.0), 3),
            "top_cumulative_s": [[round(s, 3), name] for s, name in top[:30]]}  # no floor: a small load's too


def builder_import() -> dict[str, Any]:
    """``import torch.utils.cpp_extension`` after the context, in a fresh interpreter with -X importtime."""
    code = ("import time, torch; torch.zeros(1, device='cuda'); t = time.perf_counter(); "
            "import torch.utils.cpp_extension; print(time.perf_counter() - t)")
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True, check=True)
    rows = []
    for line in done.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[0].startswith("import time:") and parts[0].split(":")[1].strip().isdigit():
            rows.append((int(parts[0].split(":")[1]), int(parts[1]), parts[2].rstrip()))
    slowest = sorted(rows, reverse=True)[:15]
    return {"import_s": round(float(done.stdout.strip().splitlines()[-1]), 3),
            "slowest_self_us": [[s, c, name] for s, c, name in slowest]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--release", required=True)
    ap.add_argument("--rows", default="", help="comma-separated problem ids whose programs build nothing")
    ap.add_argument("--builder-rounds", type=int, default=3, help="fresh processes importing torch's builder")
    ap.add_argument("--json", default="")
    ap.add_argument("--device", default="cuda:0", help="cpu: the loads alone, to try the script off the GPU")
    ap.add_argument("--child", nargs=3, metavar=("REFERENCE", "CANDIDATE", "DRAWS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child_load(args.child[0], args.child[1], args.child[2] or None)))
        return
    from cudal1.evaluator.config import EvalConfig
    from cudal1.evaluator.workers import draws_path

    draws = draws_path(EvalConfig(device=args.device)) or ""
    os.environ["LOAD_PROFILE_DEVICE"] = args.device
    from cudal1.problems import load_cudal1_release

    release = {r.problem.problem_id: r for r in load_cudal1_release(args.release) if r.candidate_source}
    out: dict[str, Any] = {"loads": {}, "builder": []}
    # the child runs in the row's folder: the package by an absolute path
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]),
                                                       os.environ.get("PYTHONPATH", "")])}
    with tempfile.TemporaryDirectory() as tmp:
        for pid in [r for r in args.rows.split(",") if r]:
            folder = Path(tmp) / pid
            folder.mkdir()
            (folder / "reference.py").write_text(release[pid].problem.source)
            (folder / "candidate.py").write_text(release[pid].candidate_source or "")
            done = subprocess.run([sys.executable, __file__, "--release", args.release, "--child",
                                   str(folder / "reference.py"), str(folder / "candidate.py"), draws],
                                  capture_output=True, text=True, cwd=folder, env=env)
            lines = done.stdout.strip().splitlines()
            out["loads"][pid] = json.loads(lines[-1]) if done.returncode == 0 and lines else {"error": done.stderr[-800:]}
            print(pid, json.dumps(out["loads"][pid])[:1500], flush=True)
    for _ in range(args.builder_rounds if args.device.startswith("cuda") else 0):
        out["builder"].append(builder_import())
        print("builder", json.dumps(out["builder"][-1]), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
