"""Where a batch's start goes: the seconds before its first evaluation, as a timeline of the parent's
steps (the fork server's start and first fork, each worker's start and its ready line, the references'
and candidates' loads with the worker's own split of them, the first calls), each batch in a fresh
process, so every start is a real one. The start is paid by every batch (an RL epoch's evaluation,
`cudal1 evaluate-one`, each device of a multi-GPU run), not once per machine.

    PYTHONPATH=. python3 benchmarks/batch_start.py --release carry/h100.jsonl --rows L1-19,L1-23,L2-12 \
        --device cuda:0 --repeats 2 --json $OUT/batch-start.json

On a CPU machine (``--device cpu``) it traces the same steps; the rows' reference programs are evaluated
as their own candidates (the template teacher's baseline), so no program but a trusted one runs.
"""

from __future__ import annotations

import argparse
import functools
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

LOAD_KEYS = ("build_s", "load_s", "first_call_s", "ready_wait_s", "load_cmd_s")


def _trace(events: list[dict[str, Any]], t0: float, owner: Any, name: str, label: str,
           detail: Any = None, at_least_s: float = 0.0) -> None:
    """Wrap ``owner.name`` so each call records its start and end (seconds since ``t0``, thread); calls
    shorter than ``at_least_s`` (a wait for what is already done) are left out."""
    original = getattr(owner, name)

    @functools.wraps(original)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        start, result = time.perf_counter() - t0, None
        try:
            result = original(*args, **kwargs)
            return result
        finally:
            end = time.perf_counter() - t0
            if end - start >= at_least_s:
                extra = detail(args, kwargs) if detail else {}
                if isinstance(result, dict):  # a load's reply: the worker's own split of it
                    extra |= {k: result[k] for k in LOAD_KEYS if k in result}
                events.append({"step": label, "start": round(start, 3), "end": round(end, 3),
                               "thread": threading.current_thread().name} | extra)

    setattr(owner, name, wrapped)


def one_batch(release: Path, rows: list[str], device: str, racy_shim: bool = False) -> dict[str, Any]:
    """One batch in this process: its timeline and the first evaluation's time. ``racy_shim``: the fail-fast
    ninja's directory made as before 2026-11-27 (cached without a lock: each thread that starts a worker
    at the batch's start may make its own, and its workers get a fork server of their own)."""
    t0 = time.perf_counter()
    from cudal1.candidates import Candidate
    from cudal1.evaluator import EvalConfig, batch, failfast, forking, process, workers
    from cudal1.generation.templates import template_source
    from cudal1.problems import load_cudal1_release

    imported = time.perf_counter() - t0
    if racy_shim:
        failfast.shim_dir = functools.cache(failfast._make_shim.__wrapped__)
    events: list[dict[str, Any]] = []
    _trace(events, t0, batch, "pin_cuda_arch", "pin_cuda_arch")
    _trace(events, t0, batch, "submit_builds", "submit_builds")
    _trace(events, t0, forking.ForkServer, "__init__", "fork_server_spawn")
    _trace(events, t0, forking.ForkServer, "fork", "fork", lambda a, k: {"argv": a[1].get("argv", [])[-1:]})
    _trace(events, t0, process.WorkerProcess, "__init__", "worker_spawn", lambda a, k: {"name": a[3]})
    _trace(events, t0, process.WorkerProcess, "wait_ready", "worker_ready", lambda a, k: {"name": a[0].name}, 0.002)
    _trace(events, t0, workers.ReferenceSession, "_load", "reference_load",
           lambda a, k: {"problem": a[0].problem.problem_id}, 0.002)
    _trace(events, t0, batch, "load_candidate", "candidate_load", lambda a, k: {"name": a[0].name})
    by_id = {r.problem.problem_id: r.problem for r in load_cudal1_release(release)}
    problems = [by_id[r] for r in rows]
    candidates = [Candidate(p.problem_id, template_source(p, "baseline"), "baseline") for p in problems]
    config = EvalConfig(device=device, timing_trials=5)
    firsts: list[float] = []
    started = time.perf_counter() - t0
    results = batch.evaluate_many(problems, candidates, config, [device],
                                  progress=lambda e: firsts.append(round(time.perf_counter() - t0, 3)))
    servers = sum(e["step"] == "fork_server_spawn" for e in events)
    return {"imports_s": round(imported, 3), "batch_started_s": round(started, 3), "evaluations": firsts,
            "fork_servers": servers, "racy_shim": racy_shim,
            "statuses": [e.status for e in results], "events": sorted(events, key=lambda e: e["start"])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--release", required=True, type=Path)
    ap.add_argument("--rows", default="L1-19,L1-23,L2-12")
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--racy-shim", action="store_true",
                    help="every other batch with the fail-fast ninja's directory made as before (A/B)")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # a child: one batch, JSON out
    args = ap.parse_args()
    rows = args.rows.split(",")
    if args.one:
        print(json.dumps(one_batch(args.release, rows, args.device, args.racy_shim)))
        return
    runs = []
    for i in range(args.repeats * (2 if args.racy_shim else 1)):
        racy = ["--racy-shim"] if args.racy_shim and i % 2 else []
        with tempfile.TemporaryDirectory() as tmp:
            wall = time.perf_counter()
            out = subprocess.run([sys.executable, __file__, "--one", "--release", str(args.release.resolve()), "--rows",
                                  args.rows, "--device", args.device, *racy], capture_output=True, text=True, cwd=tmp)
            wall = time.perf_counter() - wall
        if out.returncode:
            sys.exit(f"batch {i}: exit {out.returncode}\n{out.stderr[-3000:]}")
        run = json.loads(out.stdout.strip().splitlines()[-1]) | {"process_wall_s": round(wall, 3)}
        runs.append(run)
        print(f"batch {i}{' (racy shim)' if racy else ''}: imports {run['imports_s']} s, evaluations at "
              f"{run['evaluations']} s, process {run['process_wall_s']} s, fork servers {run['fork_servers']}")
        for e in run["events"]:
            extra = {k: v for k, v in e.items() if k not in ("step", "start", "end", "thread")}
            print(f"  {e['start']:7.3f} {e['end']:7.3f}  {e['step']:18s} {e['thread']:24s} {json.dumps(extra)}")
    if args.json:
        args.json.write_text(json.dumps({"device": args.device, "rows": rows, "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
