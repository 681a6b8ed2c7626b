"""Stage `augment` (CUDA-L1 stage 1): teachers write candidates for every problem, each is evaluated,
and the correct ones with their speedups form the training corpus.

Outputs in ``augment.out_dir``: ``candidates.parquet`` (everything written), ``evaluations.parquet``
(their evaluations) and ``corpus.parquet`` (the correct ones, with references and speedups).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from prefect import flow, get_run_logger

from cudal1.config import AugmentParams, params_dict
from cudal1.generation.augment import CompletionCache, corpus_rows, run_teacher
from cudal1.generation.teachers import extract_program
from flows._common import main, repo_root, run_name, stage_params, teachers_label
from tasks.evaluation import evaluate_candidates
from tasks.generation import (
    check_teacher_task,
    file_candidates_task,
    teacher_sampler,
    template_candidates_task,
)
from tasks.io import read_problems_task, write_candidates_task, write_corpus_task, write_evaluations_task
from tasks.tracking import stage_run


def _describe(p: AugmentParams) -> str:
    teachers = ["template"] if p.template.enabled else []
    teachers += [t.name for t in p.teachers] + [t.name for t in p.file_teachers]
    return f"{' + '.join(teachers) or 'no teachers'} on {', '.join(p.devices)}"


@flow(name="augment", flow_run_name=run_name("augment", _describe))
def augment_flow(params_path: str = "params.yaml") -> int:
    params: AugmentParams = stage_params(params_path, "augment")
    logger = get_run_logger()
    gpu = any(d.startswith("cuda") for d in params.devices)
    root = repo_root(params_path)
    with stage_run("augment", params_dict(params), root) as run:
        problems = read_problems_task(params.problems)
        run.name(problems=len(problems), model=teachers_label(params.template.enabled, [t.name for t in params.teachers]
                                                              + [t.name for t in params.file_teachers]))
        # Every endpoint answers before any evaluation starts: a typo costs seconds, not an hour.
        for i, teacher in enumerate(params.teachers):
            check_teacher_task(teacher, f"augment.teachers[{i}]")
        candidates = template_candidates_task(problems, params.template, gpu) if params.template.enabled else []
        evaluations = evaluate_candidates(problems, candidates, params.protocol, params.devices,
                                          params.measurements_cache, label="augment:template")
        for teacher in params.file_teachers:  # every program measured, like any teacher's
            read = file_candidates_task(problems, teacher)
            measured = evaluate_candidates(problems, read, params.protocol, params.devices,
                                           params.measurements_cache, label=f"augment:{teacher.name}")
            logger.info(f"teacher {teacher.name}: {len(read)} programs, {sum(e.ok for e in measured)} correct")
            candidates, evaluations = candidates + read, evaluations + measured
        completions = CompletionCache(params.completions_cache)
        for i, teacher in enumerate(params.teachers):
            sampler = teacher_sampler(teacher, f"augment.teachers[{i}]", gpu, completions)

            def evaluate(batch, name=teacher.name):
                return evaluate_candidates(problems, batch, params.protocol, params.devices,
                                           params.measurements_cache, label=f"augment:{name}")

            written, measured = run_teacher(problems, sampler, evaluate, f"teacher:{teacher.name}",
                                            teacher.samples_per_problem, teacher.stop_after_successes, extract_program)
            logger.info(f"teacher {teacher.name}: {len(written)} samples, {sum(e.ok for e in measured)} correct")
            candidates, evaluations = candidates + written, evaluations + measured
        corpus = corpus_rows(problems, candidates, evaluations, params.corpus_exclude_origins)
        out = Path(params.out_dir)
        write_candidates_task(candidates, str(out / "candidates.parquet"))
        write_evaluations_task(evaluations, str(out / "evaluations.parquet"))
        write_corpus_task(corpus, str(out / "corpus.parquet"))
        run.log_artifacts([out / "candidates.parquet", out / "evaluations.parquet", out / "corpus.parquet"],
                          artifact_path="tables")
        statuses = Counter(e.status.value for e in evaluations)
        by_origin = Counter(row["origin"] for row in corpus)
        logger.info(f"{len(candidates)} candidates, statuses {dict(statuses)}; corpus {len(corpus)} rows")
        run.log_metrics({"candidates": len(candidates), "corpus": len(corpus), "statuses": dict(statuses),
                         "corpus_by_origin": dict(by_origin)})
    return len(corpus)


if __name__ == "__main__":
    main(augment_flow, __doc__)
