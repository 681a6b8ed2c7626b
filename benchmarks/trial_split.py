"""Where a timing phase's time goes outside its timed batches: each step of a paired trial (commands to
the workers by name, waits on their process states, the parent's comparisons and /proc reads) timed in the
parent, over a reward-shaped batch (per problem one correct candidate, the reference renamed ``ModelNew``)
under the learning protocol of benchmarks/learning_gpu.py. Prints one JSON object: per step its calls and
seconds, and per row its timing phase, its timed batches and its trials.

    PYTHONPATH=. python3 benchmarks/trial_split.py --device cuda:0 --problems 4 --repeats 3

``--worker N``: instead, a worker's own side of a timing command, in this process: the first N starter
problems' references loaded into a ``Worker`` and timed as a trial times them (5 calls, one spot-checked,
the device-idle probe), each command and each integrity read after it under cProfile; prints the wall of a
command against its timed calls and the functions that took the rest.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SECONDS: dict[str, float] = defaultdict(float)
CALLS: dict[str, int] = defaultdict(int)
_local = threading.local()
# A batch's start-up steps, as (step, start, seconds) from the batch's start (CALL_START), in any thread
TIMELINE: list[tuple[str, float, float]] = []
CALL_START = [0.0]
STARTUP = ("spawn", "wait_ready", "call:load", "call:warm", "reference._load")


def _timed(name: str | None, fn: Any, by_command: bool = False) -> Any:
    """``fn`` timed under ``name`` (a worker call under its command's name), exclusive of the timed steps
    it calls, so the steps add up to the time they took."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        label = f"call:{args[1].get('cmd')}" if by_command else name
        if not threading.current_thread().name.startswith("cudal1-eval"):
            label = f"elsewhere {label}"  # loads ahead, starts, closes: beside the device loop
        stack = getattr(_local, "stack", None)
        if stack is None:
            stack = _local.stack = []
        stack.append(0.0)
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spent = time.perf_counter() - t0
            inner = stack.pop()
            SECONDS[label] += spent - inner
            CALLS[label] += 1
            if label.split(" ")[-1] in STARTUP:
                TIMELINE.append((label, round(t0 - CALL_START[0], 3), round(spent, 3)))
            if stack:
                stack[-1] += spent

    return wrapper


def instrument() -> None:
    from cudal1.evaluator import process, trials, workers

    process.WorkerProcess.call = _timed(None, process.WorkerProcess.call, by_command=True)
    process.WorkerProcess.__init__ = _timed("spawn", process.WorkerProcess.__init__)
    process.WorkerProcess.wait_ready = _timed("wait_ready", process.WorkerProcess.wait_ready)
    workers.ReferenceSession._load = _timed("reference._load", workers.ReferenceSession._load)
    for name in ("wait_asleep", "wait_stopped", "pause", "resume"):
        setattr(process.WorkerProcess, name, _timed(f"worker.{name}", getattr(process.WorkerProcess, name)))
    for name in ("compare_fingerprints", "compare_outputs", "candidate_payload", "check_integrity", "sample",
                 "check_reply", "external_wait_s", "calls_per_trial", "_check_idle"):
        if hasattr(trials, name):
            setattr(trials, name, _timed(f"trials.{name}", getattr(trials, name)))
    workers.ReferenceSession._payload = _timed("reference._payload", workers.ReferenceSession._payload)
    trials._trial = _timed("trials._trial (rest)", trials._trial)
    trials._calibrate = _timed("trials._calibrate (rest)", trials._calibrate)


def worker_side(device: str, problems: int, commands: int = 40) -> dict[str, Any]:
    import cProfile
    import pstats
    import tempfile

    from cudal1.evaluator.config import EvalConfig
    from cudal1.evaluator.worker import Worker
    from cudal1.evaluator.workers import draws_path
    from cudal1.problems import load_starter_suite

    cfg = EvalConfig(device=device)
    out: dict[str, Any] = {}
    for problem in load_starter_suite()[:problems]:
        worker = Worker(device, 1, True)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "reference.py"
            path.write_text(problem.source)
            worker.load({"role": "reference", "reference_path": str(path), "init_seed": 1, "graph_inputs": True,
                         "device_draws": draws_path(cfg), "spare_prep": False})
            seed = iter(range(10_000, 10**9, 7))

            def command(spot: bool, worker: Any = worker, seed: Any = seed, tmp: str = tmp) -> tuple[float, float, float]:
                msg = {"cmd": "time", "warmup_seeds": [], "seeds": [next(seed) for _ in range(5)],
                       "spot": [2] if spot else [], "print_key": next(seed), "clock": "host",
                       "device_draws": worker.counted is not None, "idle_device": device.startswith("cuda")}
                t0 = time.perf_counter()
                worker.warm({"seed": next(seed)})
                t1 = time.perf_counter()
                reply = worker.time_trial(msg | {"spot_path": str(Path(tmp) / "spot.pt")})
                worker.violations()
                for block in worker.keep:
                    block.release()
                worker.keep = []
                return time.perf_counter() - t1, t1 - t0, sum(reply["ms"]) / 1e3

            for _ in range(5):
                command(True)
            walls, warms, timed = [], [], []
            profile = cProfile.Profile()
            for i in range(commands):
                profile.enable()
                wall, warm, calls = command(i % 3 == 0)
                profile.disable()
                walls.append(wall)
                warms.append(warm)
                timed.append(calls)
            stats = pstats.Stats(profile)
            top = sorted(((v[3], f"{Path(k[0]).name}:{k[2]}") for k, v in stats.stats.items()), reverse=True)  # type: ignore[attr-defined]
            walls.sort()
            out[problem.problem_id] = {
                "command_ms_median": round(1e3 * walls[len(walls) // 2], 3),
                "timed_calls_ms_median": round(1e3 * sorted(timed)[len(timed) // 2], 3),
                "warm_ms_median": round(1e3 * sorted(warms)[len(warms) // 2], 3),
                "cumulative_ms_per_command": {name: round(1e3 * t / commands, 3) for t, name in top[:40]},
            }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--problems", type=int, default=4, help="first N starter problems")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--worker", type=int, default=0, help="profile a worker's side for the first N problems")
    ap.add_argument("--no-instrument", action="store_true", help="walls only: nothing wrapped")
    ap.add_argument("--keep", action="store_true",
                    help="odd repeats keep their references for the next odd one (kept.KeptReferences)")
    args = ap.parse_args()
    if args.worker:
        print(json.dumps({"device": args.device, "worker": worker_side(args.device, args.worker)}, indent=1))
        return

    if not args.no_instrument:
        instrument()
    from cudal1.candidates import Candidate
    from cudal1.evaluator import evaluate_many
    from cudal1.evaluator.config import EvalConfig
    from cudal1.evaluator.kept import KeptReferences
    from cudal1.problems import load_starter_suite

    problems = load_starter_suite()[: args.problems]
    kept = KeptReferences()
    config = EvalConfig(device=args.device, correctness_trials=2, timing_trials=3, target_trial_ms=10.0,
                        warmup_iters=1, remeasure=0)
    rows: list[dict[str, Any]] = []
    walls: list[float] = []
    arms: list[str] = []
    ends: list[list[float]] = []
    timelines: list[list[tuple[str, float, float]]] = []
    for rep in range(args.repeats):
        if rep == 1:  # the first repeat pays the fork server's start and first uses: not counted
            SECONDS.clear()
            CALLS.clear()
            rows.clear()
        candidates = [Candidate(p.problem_id, p.source.replace("class Model(", "class ModelNew(") + f"\n# {rep}\n")
                      for p in problems]
        # with --keep: even repeats start and close their references; odd ones keep theirs for the next odd
        # one, which takes them (repeat 1 fills the pool: "priming", like repeat 0 not counted as an arm)
        references = kept if args.keep and rep % 2 else None
        started = time.perf_counter()
        CALL_START[0] = started
        TIMELINE.clear()
        recorded: list[float] = []
        found = evaluate_many(problems, candidates, config, references=references,
                              progress=lambda e, r=recorded, t=started: r.append(round(time.perf_counter() - t, 3)))
        walls.append(round(time.perf_counter() - started, 3))
        arms.append("priming" if args.keep and rep == 1 else "kept" if references is not None else "fresh")
        ends.append(recorded)
        timelines.append(sorted(TIMELINE, key=lambda t: t[1]))
        for e in found:
            x = e.extra
            rows.append({"repeat": rep, "problem": e.problem_id, "status": e.status.value, "row_s": x.get("row_s"),
                         "reference_wait_s": x.get("reference_wait_s"), "group_wait_s": x.get("group_wait_s"),
                         "timing_s": x.get("timing_s"), "batches_s": x.get("batches_s"),
                         "correctness_s": x.get("correctness_s"), "trials": e.trials,
                         "iters_per_trial": x.get("iters_per_trial")})
    counted = [r for r in rows if r["timing_s"] is not None]
    timing = sum(r["timing_s"] for r in counted)
    trials_n = sum(r["trials"] or 0 for r in counted)
    print(json.dumps({
        "device": args.device, "walls_s": walls, "arms": arms, "recorded_at_s": ends, "startup": timelines,
        "rows": rows,
        "timing_s": round(timing, 3), "batches_s": round(sum(r["batches_s"] for r in counted), 3),
        "trials": trials_n,
        "steps": {k: {"calls": CALLS[k], "s": round(v, 4), "ms_per_call": round(1e3 * v / max(CALLS[k], 1), 3)}
                  for k, v in sorted(SECONDS.items(), key=lambda kv: -kv[1])},
    }, indent=1))


if __name__ == "__main__":
    main()
