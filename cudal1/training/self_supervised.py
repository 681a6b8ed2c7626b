"""Self-supervised rounds (CUDA-L1 stage 2): sample k candidates per problem from the current policy,
evaluate them, fine-tune on the executable and correct ones only. Speed is ignored here: this is REINFORCE
without a baseline with reward 1 for a correct program and 0 otherwise, which is exactly "fine-tune on the
successes"."""

from __future__ import annotations

import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cudal1.candidates import Status
from cudal1.generation.backends import GenerationBackend
from cudal1.pool import CandidatePool
from cudal1.problems import Problem
from cudal1.training.data import contrastive_prompt, fit_length
from cudal1.training.finetune import MetricSink, finetune
from cudal1.training.rewards import EvaluateFn, SpeedupReward
from cudal1.training.settings import SamplingSettings, SelfSupervisedSettings


def sample_candidates(backend: GenerationBackend, problems: Mapping[str, Problem], pool: CandidatePool,
                      sampling: SamplingSettings, settings: SelfSupervisedSettings, seed: int) -> list[dict[str, Any]]:
    """k completions per problem, one prompt per problem built from the pool as it stands."""
    rng = random.Random(seed)
    prompts = {pid: contrastive_prompt(p, pool, rng, settings.prompts)[0] for pid, p in sorted(problems.items())}
    outputs = backend.generate(list(prompts.values()), sampling.samples, sampling.max_new_tokens, sampling.temperature)
    return [{"problem_id": pid, "prompt": prompt, "completion": c}
            for (pid, prompt), completions in zip(prompts.items(), outputs, strict=True) for c in completions]


def self_supervised_round(
    model: Any,
    tokenizer: Any,
    backend: GenerationBackend,
    problems: Mapping[str, Problem],
    pool: CandidatePool,
    evaluate: EvaluateFn,
    settings: SelfSupervisedSettings,
    round_index: int,
    work_dir: str | Path,
    *,
    pool_path: str | Path | None = None,
    cache: CandidatePool | None = None,
    cache_path: str | Path | None = None,
    sink: MetricSink | None = None,
    step_offset: int = 0,
) -> tuple[Any, dict[str, Any], list[dict[str, Any]]]:
    """One round. Returns the (possibly) fine-tuned model, the round's summary and the sample rows
    (problem_id, completion, status, speedup) for the stage's data output."""
    samples = sample_candidates(backend, problems, pool, settings.sampling, settings,
                                seed=settings.finetune.seed + 1000 * round_index)
    before = {e.key for e in pool.entries() if e.ok}
    judge = SpeedupReward(problems, evaluate, pool, pool_path=pool_path, cache=cache, cache_path=cache_path,
                          stage=f"self_supervised-{round_index}", admit=settings.prompts.admit,
                          admit_margin=settings.prompts.admit_margin, require_analysis=True)
    judge([s["completion"] for s in samples], prompts=[s["prompt"] for s in samples],
          problem_id=[s["problem_id"] for s in samples])
    for row, record in zip(samples, judge.history, strict=True):
        row.update(status=record.status, speedup=record.speedup)
    correct = [s for s in samples if s["status"] == Status.OK.value]
    tokens = sum(len(tokenizer(s["completion"], add_special_tokens=False)["input_ids"]) for s in samples)
    summary: dict[str, Any] = {
        "round": round_index,
        "samples": len(samples),
        "correct": len(correct),
        "success_rate": len(correct) / len(samples) if samples else 0.0,
        "problems_solved": len({s["problem_id"] for s in correct}),
        "generated_tokens": tokens,
        "evaluated": judge.evaluated,
        # The corpus's growth: correct programs the pool did not hold (the next round's exemplars and
        # training programs come from it), and how many correct programs it holds after the round.
        "new_correct": len({e.key for e in pool.entries() if e.ok} - before),
        "pool_correct": sum(e.ok for e in pool.entries()),
    }
    # Training prompts are drawn again from the pool, which now holds this round's programs too: the
    # policy then learns on prompts like those of the next round and of RL, whose exemplars are its own
    # programs. A correct program is a correct answer whatever exemplars its prompt shows. Measured on
    # the tiny policy: with only corpus exemplars in training, RL prompts drawn from the grown pool
    # halved its success rate with the weights unchanged.
    rng = random.Random(settings.finetune.seed * 7919 + round_index)
    redrawn = [{"problem_id": s["problem_id"], "completion": s["completion"],
                "prompt": contrastive_prompt(problems[s["problem_id"]], pool, rng, settings.prompts)[0]}
               for s in correct for _ in range(settings.copies)]
    rows, dropped = fit_length(redrawn, tokenizer, settings.finetune.max_length)
    summary["dropped_too_long"] = dropped
    if rows:  # nothing correct: the policy stays as it is for this round
        model, fit = finetune(model, tokenizer, rows, settings.finetune, Path(work_dir) / f"round-{round_index}",
                              sink=sink, prefix="ssl_", step_offset=step_offset)
        summary |= {f"finetune_{k}": v for k, v in fit.items()}
    return model, summary, samples


def run_self_supervised(
    model: Any,
    tokenizer: Any,
    problems: Mapping[str, Problem],
    pool: CandidatePool,
    evaluate: EvaluateFn,
    settings: SelfSupervisedSettings,
    work_dir: str | Path,
    *,
    pool_path: str | Path | None = None,
    cache: CandidatePool | None = None,
    cache_path: str | Path | None = None,
    sink: MetricSink | None = None,
    on_round: Any = None,
) -> tuple[Any, list[dict[str, Any]]]:
    """All rounds. ``on_round(round_index, model, summary, samples)`` runs after each round (the flow
    saves the round's checkpoint and samples there). Sampling uses the transformers backend on the
    policy being trained: its weights change every round."""
    from cudal1.generation.backends import TransformersBackend

    summaries: list[dict[str, Any]] = []
    step = 0
    for r in range(settings.rounds):
        backend = TransformersBackend(model, tokenizer, batch_size=settings.sampling.batch_size,
                                      seed=settings.finetune.seed + r)
        model, summary, samples = self_supervised_round(
            model, tokenizer, backend, problems, pool, evaluate, settings, r, work_dir,
            pool_path=pool_path, cache=cache, cache_path=cache_path, sink=sink, step_offset=step)
        step += int(summary.get("finetune_steps", 0))
        summaries.append(summary)
        if sink is not None:
            sink({f"ssl_round_{k}": float(v) for k, v in summary.items() if isinstance(v, int | float)}, r)
        if on_round is not None:
            on_round(r, model, summary, samples)
    return model, summaries
