"""Prefect tasks of the promotion gate: the prompts both versions answer, and one version's programs, written
by the registered model loaded through its own MLflow loader."""

from __future__ import annotations

from typing import Any

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from cudal1.candidates import Candidate
from cudal1.problems import Problem


@task(cache_policy=NO_CACHE)
def gate_prompts_task(problems: list[Problem], corpus_path: str, params: Any) -> dict[str, str]:
    """One contrastive prompt per problem, its exemplars drawn once from the augment corpus with a fixed
    seed: both versions answer exactly the same text."""
    import random

    from cudal1.pool import CandidatePool
    from cudal1.training.data import contrastive_prompt, load_corpus

    pool = CandidatePool(load_corpus(corpus_path))
    rng = random.Random(params.seed)
    return {p.problem_id: contrastive_prompt(p, pool, rng, params.prompts)[0]
            for p in sorted(problems, key=lambda p: p.problem_id)}


@task(cache_policy=NO_CACHE)
def version_candidates_task(repo_root: str, name: str, version: str, prompts: dict[str, str],
                            params: Any) -> list[Candidate]:
    """``params.samples`` programs per prompt from version ``version`` of registered model ``name``. A
    completion without a program counts as a failure of that problem (no candidate)."""
    from cudal1.prompts import parse_response
    from tasks.registry import load_policy_version

    policy = load_policy_version(repo_root, name, version)
    outputs = policy.generate(list(prompts.values()), params.samples, params.max_new_tokens, params.temperature,
                              seed=params.seed)
    origin = f"gate:{name}/v{version}"
    candidates = []
    for problem_id, completions in zip(prompts, outputs, strict=True):
        for text in completions:
            parsed = parse_response(text)
            if parsed.ok:
                candidates.append(Candidate(problem_id, parsed.code, origin=origin))
    get_run_logger().info(f"{name} v{version}: {len(candidates)} programs for {len(prompts)} problems")
    return candidates
