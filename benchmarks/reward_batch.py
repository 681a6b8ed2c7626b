"""A batch shaped like an RL reward call: per problem one correct candidate (the reference renamed
``ModelNew``) and several that do not parse, as the tiny policy writes them (12-14 of 18 in a reward call
on an H200, docs/gpu-runs.md#2026-12-02-rl-unwrap). Each repeat is a fresh ``evaluate_many`` in this
process (the fork server stays up, as in an RL run); prints each repeat's wall and rows.

    PYTHONPATH=. python3 benchmarks/reward_batch.py --device cpu --repeats 3

``--keep``: odd repeats keep the problems' references for the next odd one (kept.KeptReferences, as the
learning stages' evaluator does; repeat 1 fills the pool), even repeats start and close their own.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--problems", type=int, default=3, help="first N starter problems")
    ap.add_argument("--broken", type=int, default=4, help="candidates per problem that do not parse")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--keep", action="store_true", help="odd repeats keep their references for the next odd one")
    args = ap.parse_args()

    from cudal1.candidates import Candidate
    from cudal1.evaluator import evaluate_many
    from cudal1.evaluator.config import EvalConfig
    from cudal1.evaluator.kept import KeptReferences
    from cudal1.problems import load_starter_suite

    problems = load_starter_suite()[: args.problems]
    # the learning protocol of benchmarks/learning_gpu.py
    config = EvalConfig(device=args.device, correctness_trials=2, timing_trials=3, target_trial_ms=10.0,
                        warmup_iters=1, remeasure=0)
    kept = KeptReferences()
    for rep in range(args.repeats):
        candidates = []
        for p in problems:
            correct = p.source.replace("class Model(", "class ModelNew(")
            candidates.append(Candidate(p.problem_id, correct + f"\n# repeat {rep}\n"))  # new each repeat: no cache
            candidates += [Candidate(p.problem_id, correct[: 40 + 30 * k] + f"\n  def (:\n# {rep} {k}\n")
                           for k in range(args.broken)]
        started = time.perf_counter()
        references = kept if args.keep and rep % 2 else None
        found = evaluate_many(problems, candidates, config, references=references)
        wall = time.perf_counter() - started
        rows: dict[str, list[float | None]] = {}
        for e in found:
            rows.setdefault(e.status.value, []).append(e.extra.get("row_s"))
        arm = "fresh" if references is None else "priming" if rep == 1 else "kept"
        print(json.dumps({"repeat": rep, "arm": arm, "wall_s": round(wall, 3), "row_s": rows}), flush=True)
    kept.close()


if __name__ == "__main__":
    main()
