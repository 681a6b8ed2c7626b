"""Supervised fine-tuning through TRL's SFTTrainer (full or LoRA): the SFT stage and the fine-tuning
half of each self-supervised round use it."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from cudal1.training.settings import FinetuneSettings

# (metrics, step) -> None: where per-step numbers go (MLflow in the flows, nothing in the core).
MetricSink = Callable[[dict[str, float], int], None]


def on_cpu() -> bool:
    import torch

    return not torch.cuda.is_available()


def cpu_has_bf16() -> bool:
    """Whether this CPU computes bf16 matmuls natively (oneDNN's AVX512-BF16 or AMX kernels); without them
    bf16 autocast is emulated and slower than float32."""
    import torch

    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a torch built without oneDNN
        return False


def device_kwargs(precision: str | None = None) -> dict[str, Any]:
    """TrainingArguments for this machine and a ``FinetuneSettings.precision``. On CPU, ``use_cpu`` and bf16
    autocast only where asked ("bf16") or where "auto" finds it native (:func:`cpu_has_bf16`); None is float32
    (TRL defaults bf16 to True, which is emulated, or refused, without native support). On GPUs, one per
    process (:func:`one_gpu_per_process`) and the trainer's default unless a precision is forced."""
    if on_cpu():
        return {"use_cpu": True, "bf16": precision == "bf16" or (precision == "auto" and cpu_has_bf16())}
    one_gpu_per_process()
    if precision == "fp32":
        return {"bf16": False, "fp16": False}
    return {"bf16": True} if precision == "bf16" else {}


def one_gpu_per_process() -> None:
    """Refuse, naming the two ways out, a process that sees several GPUs and was not started by a launcher:
    TRL's trainers would wrap the model in DataParallel and stop with their own error, deep in the stage
    (as a learning run on a two-GPU host did). TRL lets a model split across devices by ``device_map`` through;
    :func:`load_policy` loads the policy whole, so here a process that sees several GPUs can only mean
    DataParallel."""
    import torch

    visible = torch.cuda.device_count()
    if visible > 1 and "WORLD_SIZE" not in os.environ:  # accelerate launch and torchrun set WORLD_SIZE
        raise RuntimeError(
            f"{visible} GPUs are visible to this training process, and TRL trains on one GPU per process. "
            "Make one visible (CUDA_VISIBLE_DEVICES=0), or train on all of them with "
            "`accelerate launch -m cudal1.training.launch sft` (or `rl`; docs/guides/gpu.md, \"Several GPUs for training\").")


POINTER = "policy.json"  # a policy stage that names a hub id or an outside folder writes only this


def policy_source(path: str | Path) -> str:
    """The folder (or hub id) to load a policy from: ``path`` itself, or what its pointer file names."""
    import json

    pointer = Path(path) / POINTER
    if pointer.exists() and not (Path(path) / "config.json").exists():
        return json.loads(pointer.read_text())["model"]
    return str(path)


def load_policy(path: str | Path) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:  # many hub models ship without one; generation and batching need it
        tokenizer.pad_token = tokenizer.eos_token
    return AutoModelForCausalLM.from_pretrained(path), tokenizer


def save_policy(model: Any, tokenizer: Any, out_dir: str | Path) -> Path:
    """Save a plain model (LoRA adapters merged) so every later stage loads it the same way."""
    out_dir = Path(out_dir)
    if hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir


def lora_config(r: int, alpha: int) -> Any:
    from peft import LoraConfig

    # All linear projections of a Llama-shaped block: small adapters, still enough to move the policy.
    return LoraConfig(r=r, lora_alpha=alpha, lora_dropout=0.0, task_type="CAUSAL_LM",
                      target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])


def make_step_callback(sink: MetricSink | None, prefix: str, step_offset: int = 0) -> Any:
    """A TrainerCallback forwarding each log line (loss, learning rate, TRL's reward columns) to ``sink``
    with ``prefix`` on the names and ``step_offset`` added to the step, so several trainers in one stage
    (rounds, epochs) log on one axis."""
    from transformers import TrainerCallback

    class _Forward(TrainerCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **_: Any) -> None:
            if sink is None or not logs:
                return
            numbers = {f"{prefix}{k.replace('/', '_')}": float(v) for k, v in logs.items()
                       if isinstance(v, int | float) and math.isfinite(float(v))}
            if numbers:
                sink(numbers, step_offset + state.global_step)

    return _Forward()


def completion_logits(model: Any, inputs: dict[str, Any]) -> tuple[Any, Any]:
    """The logits of the positions that predict a completion token, and those tokens (-100 where a row has
    none there): the backbone runs over every position, the LM head only over the columns where some row
    of the batch has a label. TRL's fused head scores every position off the GPU (``_use_triton``), prompt
    tokens included, which are three quarters of a contrastive SFT example."""
    labels = inputs["labels"][:, 1:]
    columns = (labels != -100).any(0).nonzero().squeeze(1)
    outputs = model(input_ids=inputs["input_ids"], attention_mask=inputs.get("attention_mask"), use_cache=False,
                    logits_to_keep=columns)  # the logits at `columns` predict the tokens at `columns + 1`
    return outputs.logits.float(), labels[:, columns]


def completion_head_trainer() -> type:
    """TRL's SFTTrainer with its loss computed by :func:`completion_logits`: the same mean negative
    log-likelihood over completion tokens (the same losses step for step, tests/learning/test_sft_loss.py),
    with entropy and token accuracy logged as TRL logs them. On the 2-core CPU it trained the default SFT
    stage in 127.5-138.5 s against 182.6 s (docs/learning.md at 88f971b, "On a CPU, SFT's time was TRL's LM head over
    the prompts")."""
    import torch
    from trl import SFTTrainer

    class CompletionHeadSFTTrainer(SFTTrainer):
        def compute_loss(self, model: Any, inputs: dict[str, Any], return_outputs: bool = False,
                         num_items_in_batch: Any = None) -> Any:
            logits, labels = completion_logits(model, inputs)
            mask = labels != -100
            count = mask.sum() if num_items_in_batch is None else num_items_in_batch
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1),
                                                     ignore_index=-100, reduction="sum")
            loss = loss / torch.as_tensor(count).clamp(min=1)
            with torch.no_grad():
                kept = logits[mask]
                if len(kept):
                    logp = torch.log_softmax(kept, -1)
                    self._metrics["train"]["entropy"].append(float(-(logp.exp() * logp).sum(-1).mean()))
                    self._metrics["train"]["mean_token_accuracy"].append(
                        float((kept.argmax(-1) == labels[mask]).float().mean()))
                if "attention_mask" in inputs:
                    self._total_train_tokens += int(inputs["attention_mask"].sum())
                self._metrics["train"]["num_tokens"] = [self._total_train_tokens]
            return (loss, None) if return_outputs else loss

    return CompletionHeadSFTTrainer


def finetune(
    model: Any,
    tokenizer: Any,
    rows: Sequence[dict[str, Any]],
    settings: FinetuneSettings,
    work_dir: str | Path,
    *,
    sink: MetricSink | None = None,
    prefix: str = "sft_",
    step_offset: int = 0,
) -> tuple[Any, dict[str, Any]]:
    """Fine-tune on prompt/completion ``rows`` (loss on the completion only). Returns the trained model
    (LoRA merged) and a summary: examples, steps, first/last loss, seconds."""
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    if not rows:
        raise ValueError("no training examples: the corpus (or this round's correct samples) is empty")
    args = SFTConfig(
        output_dir=str(work_dir),
        num_train_epochs=settings.epochs,
        learning_rate=settings.learning_rate,
        per_device_train_batch_size=settings.batch_size,
        gradient_accumulation_steps=settings.grad_accum,
        max_length=settings.max_length,
        lr_scheduler_type="cosine",
        warmup_steps=0,
        logging_steps=1,
        save_strategy="no",
        report_to="none",  # the flows add tracking through `sink`
        seed=settings.seed,
        disable_tqdm=True,
        # TRL turns checkpointing on by default; a small policy has memory to spare and would pay ~2x time.
        gradient_checkpointing=settings.gradient_checkpointing,
        **device_kwargs(settings.precision),
    )
    columns = [{"prompt": r["prompt"], "completion": r["completion"]} for r in rows]
    trainer = (completion_head_trainer() if on_cpu() else SFTTrainer)(
        model=model,
        args=args,
        train_dataset=Dataset.from_list(columns),
        processing_class=tokenizer,
        peft_config=lora_config(settings.lora_r, settings.lora_alpha) if settings.lora else None,
        callbacks=[make_step_callback(sink, prefix, step_offset)],
    )
    result = trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    # Under mixed precision accelerate wraps the model's forward in autocast. A caller that generates with the
    # model afterwards generated under it: the next self-supervised round wrote bf16 keys into its float32
    # static cache on a CPU, and learning_gpu.py's RL epoch generated in 6.4-8.6 s against 0.67-0.95 s on an
    # H200 (docs/gpu-runs.md at 88f971b, 2026-12-02-rl-unwrap)
    model = trainer.accelerator.unwrap_model(trainer.model, keep_fp32_wrapper=False)
    if hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    summary = {
        "examples": len(rows),
        "steps": trainer.state.global_step,
        "first_loss": losses[0] if losses else math.nan,
        "last_loss": losses[-1] if losses else math.nan,
        "train_seconds": float(result.metrics.get("train_runtime", math.nan)),
        "bf16": float(bool(args.bf16)),  # what "auto" came to on this machine (1: bf16 autocast)
    }
    return model, summary
