"""Stage `evaluate`: evaluate a candidate table (any stage's output) on the configured devices.

Rows of the ``reuse`` tables measured under the same protocol on the same hardware are taken as they
are, so evaluating the augment stage's candidates with the augment protocol costs nothing twice; point
``devices`` at ``cuda:N`` (or change the protocol) and everything is measured afresh.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from prefect import flow, get_run_logger

from cudal1.config import EvaluateParams, params_dict
from flows._common import main, repo_root, run_name, stage_params
from tasks.evaluation import cache_path, evaluate_candidates
from tasks.io import read_candidates_task, read_problems_task, seed_measurements_task, write_evaluations_task
from tasks.tracking import stage_run


def _describe(p: EvaluateParams) -> str:
    return f"{p.candidates.rsplit('/', 2)[-2]}/{p.candidates.rsplit('/', 1)[-1]} on {', '.join(p.devices)}"


@flow(name="evaluate", flow_run_name=run_name("evaluate", _describe))
def evaluate_flow(params_path: str = "params.yaml") -> int:
    params: EvaluateParams = stage_params(params_path, "evaluate")
    logger = get_run_logger()
    root = repo_root(params_path)
    with stage_run("evaluate", params_dict(params), root) as run:
        problems = read_problems_task(params.problems)
        candidates = read_candidates_task(params.candidates)
        # The "model" of an evaluation is whoever wrote the candidates: the stage whose table it reads.
        run.name(problems=len(problems), model=f"{len(candidates)} candidates of {Path(params.candidates).parent.name}")
        reused = seed_measurements_task(cache_path(params.measurements_cache), params.reuse)
        logger.info(f"{len(candidates)} candidates from {params.candidates}; {reused} earlier rows offered for reuse")
        evaluations = evaluate_candidates(problems, candidates, params.protocol, params.devices,
                                          params.measurements_cache, label="evaluate")
        write_evaluations_task(evaluations, params.out)
        run.log_artifacts([params.candidates, params.out], artifact_path="tables")
        statuses = Counter(e.status.value for e in evaluations)
        speedups = [e.speedup for e in evaluations if e.ok and e.speedup is not None]
        logger.info(f"{len(evaluations)} evaluations -> {params.out}; statuses {dict(statuses)}")
        run.log_metrics({"evaluations": len(evaluations), "correct": len(speedups), "statuses": dict(statuses),
                         "mean_speedup_correct": sum(speedups) / len(speedups) if speedups else None})
    return len(evaluations)


if __name__ == "__main__":
    main(evaluate_flow, __doc__)
