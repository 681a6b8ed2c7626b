"""Five starter problems' references against themselves under the augment stage's CPU protocol (five
correctness trials, seven timing trials at least, 40 ms a trial): each row's wall clock, timing phase,
timed batches, trials and calls per trial, then the total. Run from a code tree's root to compare trees
(the calls per trial come from timing.calls_per_trial and the worker's ``call_ms``):

    PYTHONPATH=. .venv/bin/python benchmarks/cpu_calibration.py
"""

from __future__ import annotations

import time

from cudal1.candidates import Candidate
from cudal1.evaluator import EvalConfig, evaluate_candidate
from cudal1.generation.templates import template_source
from cudal1.problems import load_starter_suite

NAMES = ("Square_matmul", "ReLU", "GELU", "Sum_reduction_dim1", "LayerNorm")


def main() -> None:
    config = EvalConfig(device="cpu", correctness_trials=5, timing_trials=7, target_trial_ms=40.0, cpu_threads=1)
    total = 0.0
    for problem in (p for p in load_starter_suite() if p.name in NAMES):
        candidate = Candidate(problem.problem_id, template_source(problem, "baseline"), origin="control")
        started = time.perf_counter()
        e = evaluate_candidate(problem, candidate, config)
        wall = time.perf_counter() - started
        total += wall
        print(f"{problem.name:20s} {e.status.value:4s} {e.speedup or 0:6.3f}x  wall {wall:5.2f} s  timing "
              f"{e.extra.get('timing_s')} s  batches {e.extra.get('batches_s')} s  trials {e.trials}  calls per "
              f"trial {e.extra.get('iters_per_trial')}  {' '.join(e.flags)}", flush=True)
    print(f"total {total:.1f} s")


if __name__ == "__main__":
    main()
