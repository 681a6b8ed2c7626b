"""Stage `policy`: the base policy. ``model: tiny`` builds the project's own small Llama with a tokenizer
trained on the problems, the corpus and the prompt files (offline, deterministic); any other value is a
hub id or a local folder, recorded in ``models/policy/policy.json`` and loaded from there by later stages.
"""

from __future__ import annotations

from prefect import flow, get_run_logger

from cudal1.config import params_dict
from cudal1.training.params import PolicyParams
from flows._common import main, policy_label, repo_root, run_name, stage_params
from tasks.io import read_problems_task
from tasks.learning import build_policy_task, read_corpus_task
from tasks.registry import log_policy
from tasks.tracking import stage_run


def _describe(p: PolicyParams) -> str:
    return f"tiny {p.layers}x{p.hidden}" if p.is_tiny else p.model


@flow(name="policy", flow_run_name=run_name("policy", _describe))
def policy_flow(params_path: str = "params.yaml") -> dict:
    params: PolicyParams = stage_params(params_path, "policy")
    root = repo_root(params_path)
    with stage_run("policy", params_dict(params), root) as run:
        problems = read_problems_task(params.problems) if params.is_tiny else []
        corpus = read_corpus_task(params.corpus) if params.is_tiny else []
        run.name(problems=len(problems) if params.is_tiny else None, model=policy_label(params_path))
        built = build_policy_task(params, problems, corpus)
        get_run_logger().info(f"policy -> {params.out_dir}: {built}")
        numbers = {k: v for k, v in built.items() if isinstance(v, int | float)}
        run.log_metrics(numbers)
        log_policy(run, params_dict(params), params.out_dir, numbers, [params.problems, params.corpus])
    return built


if __name__ == "__main__":
    main(policy_flow, __doc__)
