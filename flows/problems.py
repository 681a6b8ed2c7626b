"""Stage `problems`: load the configured suites into one table, ``data/problems/problems.parquet``."""

from __future__ import annotations

from collections import Counter

from prefect import flow, get_run_logger

from cudal1.config import ProblemsParams, params_dict
from flows._common import main, repo_root, run_name, stage_params
from tasks.io import load_suites_task, write_problems_task
from tasks.tracking import stage_run


def _describe(p: ProblemsParams) -> str:
    suites = ", ".join(s.kind if s.kind == "starter" else f"{s.kind}:{s.path}" for s in p.suites)
    limit = f", first {p.limit}" if p.limit is not None else ""
    return f"{suites}{limit}"


@flow(name="problems", flow_run_name=run_name("problems", _describe))
def problems_flow(params_path: str = "params.yaml") -> int:
    params: ProblemsParams = stage_params(params_path, "problems")
    root = repo_root(params_path)
    with stage_run("problems", params_dict(params), root) as run:
        problems = load_suites_task(params)
        write_problems_task(problems, params.out)
        run.name(problems=len(problems))
        run.log_artifacts([params.out], artifact_path="tables")
        levels = Counter(p.level for p in problems)
        get_run_logger().info(f"{len(problems)} problems ({dict(sorted(levels.items()))} by level) -> {params.out}")
        run.log_metrics({"problems": len(problems), "levels": {f"level{k}": v for k, v in levels.items()}})
    return len(problems)


if __name__ == "__main__":
    main(problems_flow, __doc__)
