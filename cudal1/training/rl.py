"""Contrastive RL (CUDA-L1 stage 3) through TRL's GRPOTrainer; no RL loop of our own.

Each epoch builds a fresh prompt set from the candidate pool as it stands (so prompts contrast the best
programs found so far), then runs one GRPOTrainer pass over it. The reward evaluates every completion and
adds it to the pool. Trainers are rebuilt per epoch because the prompts change; the model and (for a full
fine-tune) the optimizer carry over. The optimizer state is not checkpointed: a resumed run starts with a
fresh one.

Resuming: ``state.json`` in the output folder lists finished epochs and their metrics; the policy of the
last finished epoch is in ``policy/``. The pool is the evaluation cache, so a restarted epoch evaluates
only programs never seen before.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from cudal1.generation.backends import cpu_cache
from cudal1.pool import CandidatePool
from cudal1.problems import Problem
from cudal1.training.data import contrastive_prompt
from cudal1.training.finetune import (
    MetricSink,
    device_kwargs,
    lora_config,
    make_step_callback,
    on_cpu,
    save_policy,
)
from cudal1.training.rewards import EvaluateFn, SpeedupReward, epoch_metrics
from cudal1.training.settings import RLSettings


def epoch_prompts(problems: Mapping[str, Problem], pool: CandidatePool, settings: RLSettings,
                  epoch: int) -> list[dict[str, str]]:
    """The epoch's prompts. A problem's draw depends on (seed, problem, its pool entries) and, when
    exemplars are redrawn, on the epoch too. One generator per problem: with a shared one, a new exemplar
    of one problem shifted the draws of every problem after it, so prompts changed where the pool had not."""
    rows = []
    for pid in sorted(problems):
        key = f"{settings.seed}:{epoch if settings.redraw_exemplars else 0}:{pid}"
        rng = random.Random(int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big"))
        rows += [{"prompt": contrastive_prompt(problems[pid], pool, rng, settings.prompts)[0], "problem_id": pid}
                 for _ in range(settings.prompts_per_problem)]
    return rows


def step_shape(n_prompts: int, settings: RLSettings) -> tuple[int, int]:
    """(prompts per optimisation step, steps per generation batch) for an epoch of ``n_prompts`` prompts:
    TRL's batches hold whole groups and must divide the epoch, or trailing prompts are dropped.

    >>> step_shape(15, RLSettings(prompts_per_step=4))
    (3, 5)
    >>> step_shape(15, RLSettings(prompts_per_step=5, steps_per_generation=1))
    (5, 1)
    """
    per_step = max(d for d in range(1, min(settings.prompts_per_step, n_prompts) + 1) if n_prompts % d == 0)
    steps = n_prompts // per_step
    if settings.steps_per_generation is not None:
        steps = max(d for d in range(1, min(settings.steps_per_generation, steps) + 1) if steps % d == 0)
    return per_step, steps


def grpo_config(settings: RLSettings, out_dir: Path, epoch: int, n_prompts: int) -> Any:
    from trl import GRPOConfig

    per_step, steps_per_generation = step_shape(n_prompts, settings)
    return GRPOConfig(
        output_dir=str(out_dir / "trainer"),
        num_train_epochs=1,
        per_device_train_batch_size=per_step * settings.num_generations,
        steps_per_generation=steps_per_generation,
        shuffle_dataset=False,  # the epoch's prompts are already drawn at random from the pool
        num_generations=settings.num_generations,
        max_completion_length=settings.max_new_tokens,
        temperature=settings.temperature,
        top_k=0,  # sample the policy's own distribution: GRPO's ratios assume it
        cache_implementation=cpu_cache("cpu") if on_cpu() else None,  # on a GPU, TRL's default
        learning_rate=settings.learning_rate,
        lr_scheduler_type="constant",  # one short trainer per epoch: a decaying schedule would restart each time
        beta=settings.beta,
        num_iterations=settings.iterations,
        top_entropy_quantile=settings.top_entropy_quantile,
        # Off by default (TRL's vLLM generation needs a GPU and vllm installed); params turn it on.
        use_vllm=settings.use_vllm,
        vllm_mode=settings.vllm_mode,
        vllm_server_host=settings.vllm_server_host,
        vllm_server_port=settings.vllm_server_port,
        vllm_gpu_memory_utilization=settings.vllm_gpu_memory_utilization,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=settings.seed + (epoch if settings.redraw_samples else 0),  # the trainer seeds generation with it
        disable_tqdm=True,
        gradient_checkpointing=settings.gradient_checkpointing,
        **device_kwargs(),
    )


def check_vllm(settings: RLSettings) -> None:
    """With ``use_vllm``, stop before the first epoch, saying what is missing: TRL imports vllm in both modes
    (server mode for its client and weight sync), and vLLM generates on a CUDA GPU only."""
    import importlib.util

    import torch

    if not settings.use_vllm:
        return
    if importlib.util.find_spec("vllm") is None:
        raise RuntimeError("contrastive_rl.use_vllm is true but vllm is not installed where the trainer runs: run "
                           "`python -m cudal1.training.launch rl` in an environment with vllm (docs/guides/gpu.md, "
                           "\"Several GPUs for training\"), or set use_vllm: false")
    if not torch.cuda.is_available():
        raise RuntimeError("contrastive_rl.use_vllm is true but no CUDA GPU is visible: vLLM generates on GPUs "
                           "only; set use_vllm: false on a CPU")


def _adamw(model: Any, learning_rate: float) -> Any:
    import torch

    return torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=learning_rate,
                             weight_decay=0.0)


def load_state(out_dir: Path) -> dict[str, Any]:
    path = out_dir / "state.json"
    return json.loads(path.read_text()) if path.exists() else {"epochs": []}


def run_contrastive_rl(
    model: Any,
    tokenizer: Any,
    problems: Mapping[str, Problem],
    pool: CandidatePool,
    evaluate: EvaluateFn,
    settings: RLSettings,
    out_dir: str | Path,
    *,
    pool_path: str | Path | None = None,
    sink: MetricSink | None = None,
    on_epoch: Callable[[int, dict[str, float]], None] | None = None,
    load_model: Callable[[Path], Any] | None = None,
    cache: CandidatePool | None = None,
    cache_path: str | Path | None = None,
    after_epoch: Callable[[int, Any], dict[str, float]] | None = None,
) -> tuple[Any, list[dict[str, float]]]:
    """Run the epochs not finished yet in ``out_dir``. Returns the policy and every epoch's metrics.
    ``load_model(path)`` reloads the last finished epoch's policy when resuming. ``after_epoch(epoch,
    model)`` measures the epoch's policy further (e.g. :func:`held_out_metrics`); its figures join the
    epoch's metrics."""
    from datasets import Dataset
    from trl import GRPOTrainer

    check_vllm(settings)
    out_dir = Path(out_dir)
    state = load_state(out_dir)
    done = len(state["epochs"])
    if done and load_model is not None and (out_dir / "policy").exists():
        model = load_model(out_dir / "policy")
    reward = SpeedupReward(problems, evaluate, pool, clip=settings.clip, failure_reward=settings.failure_reward,
                           pool_path=pool_path, cache=cache, cache_path=cache_path, stage="contrastive_rl",
                           admit=settings.prompts.admit,
                           admit_margin=settings.prompts.admit_margin, resolution=settings.speedup_resolution,
                           require_analysis=True)
    steps = sum(int(e.get("steps", 0)) for e in state["epochs"])
    peft = lora_config(settings.lora_r, settings.lora_alpha) if settings.lora else None
    # One optimizer for all epochs of a full fine-tune: a fresh Adam every epoch takes its first steps at
    # full size in every coordinate (the second-moment estimate is still empty), which on small noisy
    # GRPO batches moved the tiny policy in random directions and lost a third of its success rate.
    optimizer = None if peft is not None else _adamw(model, settings.learning_rate)
    for epoch in range(done, settings.epochs):
        start, evaluated_before = len(reward.history), reward.evaluated
        t0 = time.perf_counter()
        rows = epoch_prompts(problems, pool, settings, epoch)
        args = grpo_config(settings, out_dir, epoch, len(rows))
        trainer = GRPOTrainer(
            model=model, reward_funcs=[reward], args=args, processing_class=tokenizer,
            train_dataset=Dataset.from_list(rows),
            peft_config=peft, callbacks=[make_step_callback(sink, "rl_", steps)],
            optimizers=(optimizer, None),
        )
        trainer.train()
        model = trainer.model
        if hasattr(model, "merge_and_unload"):  # LoRA: merge each epoch, fresh adapters next epoch
            model = model.merge_and_unload()
        metrics = epoch_metrics(reward.history[start:])
        metrics |= {"epoch": float(epoch), "steps": float(trainer.state.global_step),
                    "evaluated": float(reward.evaluated - evaluated_before),
                    "epoch_seconds": time.perf_counter() - t0} | pool.stats()
        steps += trainer.state.global_step
        if after_epoch is not None:
            metrics |= after_epoch(epoch, model)
        save_policy(model, tokenizer, out_dir / "policy")
        state["epochs"].append(metrics)
        (out_dir / "state.json").write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
        if sink is not None:
            sink({f"rl_epoch_{k}": v for k, v in metrics.items()}, epoch)
        if on_epoch is not None:
            on_epoch(epoch, metrics)
    return model, state["epochs"]


def held_out_metrics(model: Any, tokenizer: Any, problems: Mapping[str, Problem], pool: CandidatePool,
                     evaluate: EvaluateFn, settings: RLSettings, *, cache: CandidatePool | None = None,
                     seed: int = 0) -> dict[str, float]:
    """An RL epoch's figures on problems the policy is not trained on: the same kind of prompts (exemplars
    from ``pool``, which stays as it is, so every call asks the same prompts), ``num_generations`` samples
    each, scored by the RL reward; no update. ``cache`` (kept by the caller) lends earlier calls'
    measurements. Keys as :func:`epoch_metrics`'s, prefixed ``held_out_``."""
    from cudal1.generation.backends import TransformersBackend

    rows = epoch_prompts(problems, pool, settings, 0)
    outputs = TransformersBackend(model, tokenizer, seed=seed).generate(
        [r["prompt"] for r in rows], settings.num_generations, settings.max_new_tokens, settings.temperature)
    reward = SpeedupReward(problems, evaluate, CandidatePool(pool.entries()), clip=settings.clip,
                           failure_reward=settings.failure_reward, cache=cache, stage="held_out",
                           resolution=settings.speedup_resolution, require_analysis=True)
    n = settings.num_generations
    reward([c for group in outputs for c in group], prompts=[r["prompt"] for r in rows for _ in range(n)],
           problem_id=[r["problem_id"] for r in rows for _ in range(n)])
    return {f"held_out_{k}": v for k, v in epoch_metrics(reward.history).items()}
