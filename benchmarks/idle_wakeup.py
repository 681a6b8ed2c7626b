"""How often an honest program's worker used the CPU while it should have been idle: over the reference's
warm-up, which the parent reads as "the candidate's process kept running" (trials._time_reference). N copies
of one problem's own reference, evaluated as candidates under the augment protocol; for every trial, the
candidate's CPU over that window, by which side went first in it and in the trial before.

A worker continued after the last trial's stop (SIGCONT) ran its way back to its wait for a command for
0.3-2.4 ms, inside the next window when the reference went first: two such trials rejected an honest
program (WorkerProcess.wait_asleep; docs/evaluator.md, "An honest program rejected for its own wake-up").

    .venv/bin/python benchmarks/idle_wakeup.py --problem starter-L1-4 --copies 16
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cudal1.candidates import Candidate  # noqa: E402
from cudal1.evaluator import EvalConfig  # noqa: E402
from cudal1.evaluator import trials as trials_module  # noqa: E402
from cudal1.evaluator.batch import evaluate_many  # noqa: E402
from cudal1.problems import load_starter_suite  # noqa: E402

BURST_MS = 0.5  # contention.IDLE_WORK_MIN_S: below it no window counts


class _Coin(random.SystemRandom):
    """The evaluator's own generator, remembering its last coin (trials._trial: reference first or not)."""

    reference_first: bool | None = None

    def random(self) -> float:
        value = super().random()
        _Coin.reference_first = value < 0.5
        return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problem", default="starter-L1-4")
    parser.add_argument("--copies", type=int, default=16)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    problem = next(p for p in load_starter_suite() if p.problem_id == args.problem)
    source = problem.source.replace("class Model(", "class ModelNew(")
    config = EvalConfig(device="cpu", correctness_trials=5, timing_trials=7, target_trial_ms=40.0, cpu_threads=1)
    trials_module._rng = _Coin()
    windows: list[tuple[int, bool | None, float, float]] = []
    timed = trials_module._time_reference

    def spy(run, *rest, **kwargs):  # type: ignore[no-untyped-def]
        reply = timed(run, *rest, **kwargs)
        idle_cpu_s, window_s = reply[4]
        windows.append((id(run), _Coin.reference_first, idle_cpu_s * 1e3, window_s * 1e3))
        return reply

    trials_module._time_reference = spy
    candidates = [Candidate(problem.problem_id, f"{source}\n# copy {i}\n", origin="bench:reference")
                  for i in range(args.copies)]
    results = evaluate_many([problem], candidates, config)
    cells: dict[str, list[int]] = {}
    before: dict[int, bool | None] = {}
    for run_id, first, cpu_ms, _ in windows:
        side = "reference first" if first else "candidate first"
        prev = before.get(run_id, "none")
        label = f"{side}, after {'none' if prev == 'none' else 'reference first' if prev else 'candidate first'}"
        before[run_id] = first
        cell = cells.setdefault(label, [0, 0])
        cell[0] += cpu_ms > BURST_MS
        cell[1] += 1
    summary = {"problem": args.problem, "copies": args.copies,
               "statuses": {s: sum(r.status.value == s for r in results) for s in {r.status.value for r in results}},
               "windows": len(windows), "windows_over_0_5_ms": sum(c[0] for c in cells.values()),
               "window_ms_median": sorted(w for *_, w in windows)[len(windows) // 2] if windows else None,
               "worst_ms": sorted((round(c, 3) for _, _, c, _ in windows), reverse=True)[:5],
               "by_order": {k: f"{v[0]} of {v[1]}" for k, v in sorted(cells.items())}}
    print(json.dumps(summary, indent=2))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
