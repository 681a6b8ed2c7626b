"""Stage `gate`: should the policy contrastive_rl just registered replace the one in use? The new version and
the version holding the alias (``champion``) each write programs for the same prompts (one per problem,
greedy, by default), every program is measured by the evaluator under the same protocol in this run, and
``cudal1.gate.decide`` applies the margins of params.yaml. Promotion moves the alias; the decision and its
figures go to MLflow (the gate's run and tags on the new version), ``reports/gate.json`` and the Prefect UI.
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from cudal1.config import GateParams, ParamsError, params_dict
from cudal1.gate import Decision, decide
from cudal1.reports import best_per_problem
from flows._common import main, repo_root, run_name, stage_params
from tasks.evaluation import evaluate_candidates
from tasks.gate import gate_prompts_task, version_candidates_task
from tasks.io import read_problems_task, write_candidates_task, write_evaluations_task
from tasks.learning import write_metrics_task
from tasks.registry import champion_version, read_registration, set_alias_task, tag_version_task
from tasks.tracking import stage_run


def _describe(p: GateParams) -> str:
    return f"new version against `{p.alias}`, margin {p.margin.success_rate:g} success / {p.margin.speedup:g} speedup"


def summary_markdown(name: str, new: str, champion: str | None, decision: Decision, alias: str) -> str:
    """The decision as the Prefect UI shows it (a markdown artifact of the flow run)."""
    verdict = f"**promoted**: version {new} is now `{alias}`" if decision.promote else \
        f"**kept out**: `{alias}` stays on version {champion}"
    rows = ["| figure | new | champion |", "|---|---|---|"]
    for key in ("solved", "success_rate", "mean_speedup", "common", "mean_speedup_common", "median_speedup_common"):
        theirs = getattr(decision.champion, key) if decision.champion else None
        rows.append(f"| {key} | {getattr(decision.new, key)} | {theirs} |")
    return "\n".join([f"# Gate: {name} version {new}", "", verdict, "", decision.reason, "", *rows])


@task(cache_policy=NO_CACHE)
def report_decision_task(markdown: str) -> None:
    from prefect.artifacts import create_markdown_artifact

    create_markdown_artifact(markdown, key="promotion-gate", description="The promotion gate's decision")


@flow(name="gate", flow_run_name=run_name("gate", _describe))
def gate_flow(params_path: str = "params.yaml") -> dict:
    params: GateParams = stage_params(params_path, "gate")
    root = repo_root(params_path)
    if not Path(params.registration).is_file():
        raise ParamsError(f"gate.registration: {params.registration} does not exist; run the contrastive_rl stage "
                          "first (it registers the policy the gate judges)")
    registration = read_registration(params.registration)
    name, new = registration["registered_model"], registration["version"]
    logger = get_run_logger()
    with stage_run("gate", params_dict(params) | {"registered_model": name, "version": new}, root) as run:
        problems = read_problems_task(params.problems)
        run.name(problems=len(problems), model=f"{name} v{new}")
        champion = champion_version(str(root), name, params.alias)
        prompts = gate_prompts_task(problems, params.corpus, params)
        # The champion is measured again here, beside the new version: same machine, same load, same protocol.
        versions = [new] + ([champion] if champion not in (None, new) else [])
        candidates, evaluations, best = [], [], {}
        for version in versions:
            mine = version_candidates_task(str(root), name, version, prompts, params)
            measured = evaluate_candidates(problems, mine, params.protocol, params.devices, params.measurements_cache,
                                           label=f"gate:v{version}")
            best[version] = best_per_problem(measured)
            candidates, evaluations = candidates + mine, evaluations + measured
        decision = decide(best[new], best.get(champion) if champion != new else None, len(problems), params.margin)
        if champion == new:
            decision = Decision(True, f"version {new} already holds `{params.alias}`", decision.new, None)
        outcome = "promoted" if decision.promote else "kept out"
        if decision.promote:
            set_alias_task(str(root), name, new, params.alias)
        logger.info(f"{name} v{new} against {params.alias} v{champion}: {outcome}; {decision.reason}")
        out = Path(params.out_dir)
        write_candidates_task(candidates, str(out / "candidates.parquet"))
        write_evaluations_task(evaluations, str(out / "evaluations.parquet"))
        write_metrics_task({f"gate.{k}": v for k, v in decision.metrics().items()}, params.metrics)
        figures = {k: v for k, v in decision.metrics().items() if v is not None}
        tag_version_task(str(root), name, new, {f"gate.{k}": v for k, v in figures.items()} |
                         {"gate.decision": outcome, "gate.reason": decision.reason,
                          "gate.compared_with": champion or "none"})
        run.log_metrics(figures)
        run.set_tags({"gate.decision": outcome, "gate.reason": decision.reason,
                      "registered_model": name, "registered_version": new, "champion_before": champion or "none"})
        run.log_artifacts([out / "candidates.parquet", out / "evaluations.parquet"], artifact_path="tables")
        run.log_artifacts([params.metrics], artifact_path="gate")
        report_decision_task(summary_markdown(name, new, champion, decision, params.alias))
    return {"registered_model": name, "version": new, "champion_before": champion, "promoted": decision.promote,
            "reason": decision.reason}


if __name__ == "__main__":
    main(gate_flow, __doc__)
