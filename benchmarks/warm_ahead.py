"""A batch with and without its candidates got ready ahead (EvalConfig.warm_ahead: a torch.compile
program's worker makes torch.compile's start when it starts, a candidate loaded ahead its first call),
alternating rounds on the same machine. Runs wherever the evaluator runs (torch and this package only):

    python benchmarks/warm_ahead.py --device cpu --rounds 2 [--compile --compile-at-start]
    PYTHONPATH=. python3 benchmarks/warm_ahead.py --device cuda:0 --release carry/h100.jsonl \
        --rows L1-1,L1-19,L2-12,L2-25 --baselines --rounds 2

The candidates: the starter suite's template rewrites (baseline, no_grad, inference_mode; with
--compile, baseline and torch.compile), or a release's programs for --rows (with --baselines, each
row's CUDA-graph and torch.compile rewrites too). Each batch is fresh (fresh workers); a first batch,
not counted, fills the build and compile caches (--no-prime skips it). Prints per batch its wall, the
summed correctness, timing, wait and first-call seconds, and how many evaluations were ok; the verdicts
of the two settings must agree (getting ready ahead must not change one).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cudal1.candidates import Candidate  # noqa: E402
from cudal1.evaluator import batch  # noqa: E402
from cudal1.evaluator.batch import evaluate_many  # noqa: E402
from cudal1.evaluator.config import EvalConfig  # noqa: E402
from cudal1.problems import Problem, load_cudal1_release, load_starter_suite  # noqa: E402

PHASES = ("correctness_s", "timing_s", "wait_s", "first_call_s")


def inputs(args: argparse.Namespace) -> tuple[list[Problem], list[Candidate]]:
    if args.release is None:
        from cudal1.generation.templates import template_source

        problems = load_starter_suite()
        if args.compile:  # each problem's eager rewrite, then its torch.compile one (loaded ahead)
            return problems, [Candidate(p.problem_id, template_source(p, v, m), origin=f"template:{v}")
                              for p in problems for v, m in (("baseline", None), ("compile", "default"))]
        return problems, [Candidate(p.problem_id, template_source(p, v), origin=f"template:{v}")
                          for p in problems for v in ("baseline", "no_grad", "inference_mode")]
    from cudal1.reproduction import BASELINES, release_inputs

    wanted = set(args.rows.split(",")) if args.rows else None
    rows = [r for r in load_cudal1_release(args.release) if wanted is None or r.problem.problem_id in wanted]
    return release_inputs(rows, list(BASELINES) if args.baselines else [])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--release", type=Path, default=None)
    ap.add_argument("--rows", default="", help="comma-separated problem ids of the release")
    ap.add_argument("--baselines", action="store_true", help="the rows' baseline rewrites too")
    ap.add_argument("--compile", action="store_true", help="starter suite: eager and torch.compile rewrites")
    ap.add_argument("--compile-at-start", action="store_true",
                    help="torch.compile's start when a worker starts ahead on any device (default: GPUs only)")
    ap.add_argument("--rounds", type=int, default=2, help="rounds of each setting, alternating")
    ap.add_argument("--no-timing", action="store_true", help="correctness only")
    ap.add_argument("--tolerance", type=float, default=None)
    ap.add_argument("--prime", action=argparse.BooleanOptionalAction, default=True,
                    help="a first batch, not counted, that fills the build and compile caches")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error("--rounds: at least 1 (each round runs both settings)")
    problems, candidates = inputs(args)
    if args.compile_at_start:
        batch.compile_at_start = lambda config: config.warm_ahead  # what schedule.compile_at_start keeps to GPUs
    out, verdicts = [], {}
    settings = [(-1, False)] if args.prime else []
    for r in range(args.rounds):
        settings += [(r, False), (r, True)] if r % 2 == 0 else [(r, True), (r, False)]
    for r, warm in settings:
        cfg = EvalConfig(device=args.device, timing=not args.no_timing, warm_ahead=warm, tolerance=args.tolerance)
        t0 = time.perf_counter()
        evals = evaluate_many(problems, candidates, cfg, devices=[args.device])
        wall = time.perf_counter() - t0
        row = {"round": r, "warm_ahead": warm, "wall_s": round(wall, 2), "evaluations": len(evals),
               "ok": sum(e.ok for e in evals)}
        row |= {p: round(sum(float(e.extra.get(p, 0.0)) for e in evals), 2) for p in PHASES}
        print(json.dumps(row | ({"prime": True} if r < 0 else {})), flush=True)
        if r < 0:
            continue
        out.append(row)
        verdicts.setdefault(warm, []).append({(e.problem_id, e.candidate_id): e.status.value for e in evals})
    changed = [k for k, v in verdicts[True][0].items() if verdicts[False][0].get(k) != v]
    print(json.dumps({"verdicts_differ": len(changed), "rows": sorted({k[0] for k in changed})}))
    if args.json:
        args.json.write_text(json.dumps({"rounds": out, "verdicts_differ": changed}, indent=1) + "\n")


if __name__ == "__main__":
    main()
