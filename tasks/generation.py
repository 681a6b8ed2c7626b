"""Teachers as Prefect tasks: the template teacher (pure), the file teacher's programs, the endpoint
pre-flight check, and one completion per task run so a flow can fan sampling out over a thread pool with
``.map``."""

from __future__ import annotations

from collections.abc import Sequence

from prefect import get_run_logger, task, unmapped
from prefect.cache_policies import NO_CACHE

from cudal1.candidates import Candidate
from cudal1.config import FileTeacherParams, TeacherParams, TemplateParams
from cudal1.generation.augment import CompletionCache, Sampler
from cudal1.generation.templates import template_candidates
from cudal1.problems import Problem
from tasks.retry import io_only


@task(cache_policy=NO_CACHE)
def template_candidates_task(problems: list[Problem], params: TemplateParams, gpu: bool) -> list[Candidate]:
    return [c for p in problems for c in template_candidates(p, params.variants, params.compile_modes, gpu)]


@task(cache_policy=NO_CACHE, task_run_name="read {params.name}")
def file_candidates_task(problems: list[Problem], params: FileTeacherParams) -> list[Candidate]:
    """A file teacher's programs, as candidates of this run's problems."""
    from cudal1.generation.files import teacher_candidates

    candidates, unmatched, programs = teacher_candidates(problems, params)
    get_run_logger().info(f"{params.name}: {programs} programs in {params.path}, {len(candidates)} for this "
                          f"run's problems ({len(unmatched)} of problems not in the run)")
    return candidates


@task(cache_policy=NO_CACHE)
def check_teacher_task(params: TeacherParams, where: str) -> None:
    """Pre-flight: stop before any work when an endpoint is down, lacks the model or the key."""
    from cudal1.generation.teachers import OpenAITeacher

    warning = OpenAITeacher(params, where).check()
    if warning:
        get_run_logger().warning(warning)


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[2, 10], retry_condition_fn=io_only,
      task_run_name="sample {params.name} for {problem.problem_id}")
def sample_completion_task(params: TeacherParams, where: str, problem: Problem, gpu: bool) -> str:
    from cudal1.generation.teachers import OpenAITeacher

    return OpenAITeacher(params, where).sample(problem, gpu).text


def teacher_sampler(params: TeacherParams, where: str, gpu: bool, cache: CompletionCache) -> Sampler:
    """A sampler for ``run_teacher``: answers already in ``cache`` are reused (a resumed run pays for
    nothing twice), the rest are requested in parallel task runs and appended to the cache."""
    from cudal1.generation.teachers import build_prompt

    settings = {"base_url": params.base_url, "model": params.model, "api": params.api,
                "temperature": params.temperature, "max_tokens": params.max_tokens}

    def sample(requests: Sequence[tuple[Problem, int]]) -> list[str]:
        keys = [CompletionCache.key(settings, build_prompt(p, gpu)) for p, _ in requests]
        texts: list[str | None] = [cache.get(k, i) for k, (_, i) in zip(keys, requests, strict=True)]
        missing = [j for j, t in enumerate(texts) if t is None]
        futures = sample_completion_task.with_options(retries=params.retries).map(
            unmapped(params), unmapped(where), [requests[j][0] for j in missing], unmapped(gpu)
        )
        for j, future in zip(missing, futures, strict=True):
            texts[j] = future.result()
            cache.add(keys[j], texts[j])
        return [t or "" for t in texts]

    return sample
