"""Stage `report`: the paper-format tables (per level and overall), the per-origin breakdown, the
self-supervised rounds, plot data for `dvc plots` and two PNGs; ``reports/metrics.json`` feeds `dvc
metrics show` and MLflow."""

from __future__ import annotations

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from cudal1.config import ReportParams, params_dict
from cudal1.reports import Report, build_report, write_report
from flows._common import main, repo_root, run_name, stage_params
from tasks.io import read_candidates_task, read_evaluations_task, read_problems_task
from tasks.tracking import stage_run


@task(cache_policy=NO_CACHE)
def write_report_task(report: Report, out_dir: str, title: str) -> list[str]:
    return [str(p) for p in write_report(report, out_dir, title).values()]


def read_rounds(path: str) -> list[dict]:
    """The self_supervised stage's rounds table (its `dvc plots` CSV), numbers as numbers."""
    import csv
    from pathlib import Path

    from cudal1.reports import ROUND_KEYS

    with Path(path).open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    return [{k: float(r[k]) if k == "success_rate" else int(float(r[k])) for k in ROUND_KEYS if r.get(k, "") != ""}
            for r in rows]


def _describe(p: ReportParams) -> str:
    return f"{p.evaluations.rsplit('/', 2)[-2]}/{p.evaluations.rsplit('/', 1)[-1]}"


@flow(name="report", flow_run_name=run_name("report", _describe))
def report_flow(params_path: str = "params.yaml") -> dict:
    params: ReportParams = stage_params(params_path, "report")
    root = repo_root(params_path)
    with stage_run("report", params_dict(params), root) as run:
        problems = read_problems_task(params.problems)
        candidates = read_candidates_task(params.candidates)
        evaluations = read_evaluations_task(params.evaluations)
        run.name(problems=len(problems))
        report = build_report(problems, candidates, evaluations, params.threshold,
                              read_rounds(params.learning_rounds) if params.learning_rounds else ())
        paths = write_report_task(report, params.out_dir, params.title)
        o = report.overall
        get_run_logger().info(
            f"overall: {o['success']}/{o['total']} problems correct, {o['above_threshold']} above "
            f"{params.threshold}x, mean {o['mean'] or 0:.3f}x -> {params.out_dir}"
        )
        run.log_metrics(report.metrics())
        run.log_artifacts(paths, artifact_path="report")
    return report.metrics()


if __name__ == "__main__":
    main(report_flow, __doc__)
