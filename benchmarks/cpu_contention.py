"""The reference against itself on a busy CPU: several evaluators at once (as the test suite's parallel
workers run them on a 2-core machine), each evaluating a fixture problem's reference renamed to
``ModelNew`` over and over under the adversarial suite's light protocol. An honest evaluator reads about
1x; what matters is how far the figures stray and whether the ones that stray say so (flag
``contended``, cudal1/evaluator/contention.py).

    .venv/bin/python benchmarks/cpu_contention.py --problems diag_matmul,diag_matmul,matmul --repeats 20

Prints one JSON summary: per group (clean, contended) how many, their range, and those outside
[0.9, 1.1], and those off by more than 10% with no flag. ``--child`` is the per-process part.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "problems"


def child(stem: str, repeats: int) -> None:
    sys.path.insert(0, str(REPO))
    from cudal1.candidates import Candidate
    from cudal1.evaluator import EvalConfig, evaluate_candidate
    from cudal1.evaluator.workers import ReferenceSession
    from cudal1.problems import Problem

    # tests/test_adversarial.py's config: three trials of ~5 ms each
    config = EvalConfig(device="cpu", correctness_trials=3, timing_trials=3, target_trial_ms=5, run_timeout_s=20,
                        build_timeout_s=120, memory_limit_mb=4096)
    problem = Problem(f"adversarial-{stem}", 1, stem, (FIXTURES / f"{stem}.py").read_text(), suite="adversarial")
    source = problem.source.replace("class Model(", "class ModelNew(")
    with ReferenceSession(problem, config) as reference:
        for _ in range(repeats):
            e = evaluate_candidate(problem, Candidate(problem.problem_id, source, origin="control"), config,
                                   reference=reference)
            print(json.dumps({"problem": stem, "status": e.status.value, "speedup": e.speedup, "flags": list(e.flags),
                              "contended_trials": e.extra.get("contended_trials")}), flush=True)


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"evaluations": len(rows), "not_ok": sum(r["status"] != "ok" for r in rows),
                           # the figures that matter most: off by more than 10% without a flag saying so
                           "unflagged_outside_10pct": sorted(round(r["speedup"], 3) for r in rows if r["speedup"]
                                                             and not 0.9 <= r["speedup"] <= 1.1
                                                             and "noisy" not in r["flags"])}
    for name, group in (("clean", [r for r in rows if "contended" not in r["flags"]]),
                        ("contended", [r for r in rows if "contended" in r["flags"]])):
        speedups = sorted(r["speedup"] for r in group if r["speedup"] is not None)
        out[name] = {"n": len(speedups), "min": round(speedups[0], 3) if speedups else None,
                     "max": round(speedups[-1], 3) if speedups else None,
                     "outside_10pct": [round(s, 3) for s in speedups if not 0.9 <= s <= 1.1],
                     "flagged_noisy": sum("noisy" in r["flags"] for r in group)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", default="diag_matmul,diag_matmul,matmul",
                        help="one evaluator process per entry (fixture stems under tests/fixtures/problems)")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.repeats)
        return
    procs = [subprocess.Popen([sys.executable, __file__, "--child", stem, "--repeats", str(args.repeats)],
                              stdout=subprocess.PIPE, text=True) for stem in args.problems.split(",")]
    rows = []
    for proc in procs:
        out, _ = proc.communicate()
        if proc.returncode:
            raise SystemExit(f"an evaluator process failed (exit {proc.returncode})")
        rows += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    print(json.dumps(summary(rows), indent=1))


if __name__ == "__main__":
    main()
