"""The builds of a cold release run alone: every program of a CUDA-L1 release that needs a build, built
exactly as a batch builds it (``schedule.submit_builds`` itself: the same selection and build order, the
same pool size beside one device's timed workers, each build's GPU warm-up where it compiles on its first
call) into an empty build cache, with nothing timed, so no build ever pauses. The wall clock of the whole is the least a cold
run on this machine can take whatever the timing costs; each build's own wall says which programs set it.
The precompiled torch header is compiled beside the builds, as a batch does (``--no-header``: without it).
``--into-cache`` builds into the evaluator's own build cache and keeps it: a warm cache for runs that compare
devices, filled without timing anything.

    PYTHONPATH=. python benchmarks/build_floor.py --release carry/h100.jsonl --device cuda:0 \
        --json $OUT/build-floor.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cudal1.candidates import Candidate  # noqa: E402
from cudal1.evaluator.builds import header_beside, pin_cuda_arch  # noqa: E402
from cudal1.evaluator.config import EvalConfig  # noqa: E402
from cudal1.evaluator.schedule import submit_builds  # noqa: E402
from cudal1.evaluator.workers import default_extensions_root  # noqa: E402
from cudal1.problems import load_cudal1_release  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--release", required=True, type=Path)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--workers", type=int, default=0, help="build pool size (default: as a one-device batch)")
    ap.add_argument("--no-header", action="store_true", help="without the precompiled torch header (as before it)")
    ap.add_argument("--into-cache", action="store_true",
                    help="build into the evaluator's build cache (workers.default_extensions_root) and keep it")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rows = [r for r in load_cudal1_release(args.release) if r.candidate_source]
    by_id = {r.problem.problem_id: r.problem for r in rows}
    ordered = [(r.problem.problem_id, [Candidate(r.problem.problem_id, r.candidate_source or "")]) for r in rows]
    names = {c.sha256: c.problem_id for _pid, cands in ordered for c in cands}
    config = EvalConfig(device=args.device, tolerance=1e-2)
    workers = args.workers or max(1, (os.cpu_count() or 2) - 1 - 2)  # evaluate_many's pool beside one device
    if config.is_cuda:
        pin_cuda_arch([args.device])
    if args.into_cache:
        root = default_extensions_root()
        root.mkdir(exist_ok=True)
    else:
        root = Path(tempfile.mkdtemp(prefix="cudal1-build-floor-"))
    root.chmod(0o711)
    each: dict[str, dict] = {}
    started = time.perf_counter()
    header = None
    try:
        with ThreadPoolExecutor(max_workers=1) as beside, ThreadPoolExecutor(max_workers=workers) as pool:
            # the batch's precompiled torch header, beside its builds as evaluate_many compiles it
            if not args.no_header:
                header = header_beside(beside, [c for _pid, cands in ordered for c in cands], root, config)
            # the batch's own selection, order and build (each future: its error and its wall)
            builds = submit_builds(pool, ordered, by_id, config, [args.device], root)
            futures = {future: sha for sha, future in builds.items()}
            for done, future in enumerate(as_completed(futures), 1):
                pid = names[futures[future]]
                error, wall = future.result()
                each[pid] = {"wall_s": round(wall, 1), "error": error[:200]}
                print(f"[{done}/{len(builds)} {time.perf_counter() - started:6.1f}s] {pid:7s} "
                      f"{wall:6.1f}s {error[:80]}", flush=True)
    finally:
        if not args.into_cache:
            shutil.rmtree(root, ignore_errors=True)
    walls = sorted(v["wall_s"] for v in each.values())
    summary = {"builds": len(each), "workers": workers, "cpu_count": os.cpu_count(),
               "wall_s": round(time.perf_counter() - started, 1),
               "build_wall_s_sum": round(sum(walls), 1),
               "build_wall_s_median": statistics.median(walls) if walls else None,
               "slowest": sorted(each.items(), key=lambda kv: -kv[1]["wall_s"])[:8],
               "failed": sum(bool(v["error"]) for v in each.values()),
               "header": dict(zip(("message", "wall_s"), header.result())) if header is not None else None}
    print("summary", json.dumps(summary), flush=True)
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "builds": each}, indent=1))


if __name__ == "__main__":
    main()
