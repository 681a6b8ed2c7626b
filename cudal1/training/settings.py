"""Settings of the learning stages: one frozen dataclass per ``params.yaml`` section (``policy``, ``sft``,
``self_supervised``, ``contrastive_rl``), validated on construction with messages that say how to fix
the value. Defaults are the embedded CPU configuration measured in docs/learning.md at 88f971b."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Literal


def _positive(obj: Any, *names: str) -> None:
    for name in names:
        if getattr(obj, name) <= 0:
            raise ValueError(f"{type(obj).__name__}.{name}={getattr(obj, name)}: must be positive")


PRECISIONS = ("auto", "fp32", "bf16")  # FinetuneSettings.precision


@dataclass(frozen=True)
class PromptSettings:
    """How exemplars are chosen for a contrastive prompt (CUDA-L1 §2.4.3)."""

    exemplars: int = 2  # N: exemplars per prompt, from different buckets
    bucket_width: float = 0.1  # Δs: score bucket width, in speedup units
    temperature: float = 0.5  # τ: softmax temperature over bucket-mean speedups
    # Which new correct candidates may become exemplars: "all" (the paper's database) or "improving" (only
    # those faster than every exemplar of their problem so far). See CandidatePool.admits.
    admit: str = "all"
    admit_margin: float = 0.0  # "improving" means faster than the best exemplar by more than this (relative)

    def __post_init__(self) -> None:
        _positive(self, "bucket_width", "temperature")
        if self.admit_margin < 0:
            raise ValueError(f"prompts.admit_margin={self.admit_margin}: use 0 or a positive fraction")
        if self.admit not in ("all", "improving"):
            raise ValueError(f"prompts.admit={self.admit!r}: use 'all' or 'improving'")
        if self.exemplars < 0:
            raise ValueError(f"exemplars={self.exemplars}: use 0 (no exemplars) or more")


@dataclass(frozen=True)
class PolicySettings:
    """``model: tiny`` builds the project's own policy; anything else is a hub id or a local path."""

    model: str = "tiny"  # tiny: the project's small Llama, built offline; else a hub id or a local folder
    vocab_size: int = 4096  # tiny only: the tokenizer's upper bound
    hidden: int = 128  # tiny only: hidden size
    layers: int = 2  # tiny only: transformer layers
    max_positions: int = 4096  # tiny only: the longest sequence
    seed: int = 0  # tiny only: same texts and seed give byte-identical files

    def __post_init__(self) -> None:
        _positive(self, "vocab_size", "hidden", "layers", "max_positions")
        if self.model == "tiny" and self.hidden % 32:
            raise ValueError(f"policy.hidden={self.hidden}: use a multiple of 32 (the head size)")

    @property
    def is_tiny(self) -> bool:
        return self.model == "tiny"


@dataclass(frozen=True)
class FinetuneSettings:
    """Shared by SFT and the self-supervised rounds: how TRL's SFTTrainer fine-tunes."""

    epochs: float = 8.0  # passes over the examples
    learning_rate: float = 2e-3  # AdamW's learning rate
    batch_size: int = 8  # examples per device and step
    grad_accum: int = 1  # steps accumulated per update
    max_length: int = 3072  # prompt + completion tokens; longer examples are dropped, not truncated
    lora: bool = False  # full fine-tune by default: a tiny policy has no reason to be frozen
    lora_r: int = 16  # LoRA rank (with lora: true)
    lora_alpha: int = 32  # LoRA scaling (with lora: true)
    gradient_checkpointing: bool = False  # turn on for large policies (memory for time)
    seed: int = 0  # the trainer's seed
    # The matmuls' precision while training (the weights stay float32): "auto" is bf16 autocast on a CPU that
    # computes bf16 natively (oneDNN: AVX512-BF16 or AMX) and float32 on one that does not, the trainer's own
    # default on a GPU; "fp32" or "bf16" force it. On a 2-core AVX512-BF16 CPU the default SFT trained in
    # 40.3 s against 61.3 s (docs/learning.md at 88f971b, "bf16 autocast on a CPU that has it").
    precision: str = "auto"

    def __post_init__(self) -> None:
        _positive(self, "epochs", "learning_rate", "batch_size", "grad_accum", "max_length", "lora_r", "lora_alpha")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision={self.precision!r}: use one of {', '.join(PRECISIONS)}")


@dataclass(frozen=True)
class SamplingSettings:
    samples: int = 4  # k completions per problem (per prompt)
    max_new_tokens: int = 384  # longest completion, in tokens
    temperature: float = 1.0  # 0: greedy
    batch_size: int = 8  # prompts per generate call

    def __post_init__(self) -> None:
        _positive(self, "samples", "max_new_tokens", "batch_size")
        if self.temperature < 0:
            raise ValueError(f"temperature={self.temperature}: use 0 (greedy) or a positive value")


@dataclass(frozen=True)
class SelfSupervisedSettings:
    # Rounds of: sample, evaluate, fine-tune on the correct ones, each sampling the policy the round before
    # fine-tuned (the method iterates); 0 skips the stage.
    rounds: int = 2
    copies: int = 2  # each correct sample is trained on this often, each time under a freshly drawn prompt
    sampling: SamplingSettings = SamplingSettings()  # how each round samples
    finetune: FinetuneSettings = FinetuneSettings(epochs=2.0, learning_rate=5e-4)  # how each round fine-tunes
    prompts: PromptSettings = PromptSettings()  # how the prompts' exemplars are drawn

    def __post_init__(self) -> None:
        if self.rounds < 0:
            raise ValueError(f"self_supervised.rounds={self.rounds}: use 0 (skip) or more")
        if self.copies < 1:
            raise ValueError(f"self_supervised.copies={self.copies}: use 1 or more")


@dataclass(frozen=True)
class RLSettings:
    """Contrastive RL through TRL's GRPOTrainer. One epoch = one pass over ``prompts_per_problem`` prompts
    per problem, each built from the pool as it stands at the start of the epoch."""

    epochs: int = 3  # a rerun with more epochs resumes after the last finished one
    prompts_per_problem: int = 1  # prompts per problem in an epoch
    # True: every epoch draws its exemplars afresh. False: the draw is seeded the same every epoch, so an
    # epoch's prompts change only where the pool gained an exemplar, and epoch metrics compare policies
    # rather than the luck of the draw (15 prompts per epoch made that luck larger than the RL effect).
    redraw_exemplars: bool = True
    # True: epoch e samples its completions with seed + e. False: every epoch samples with the same seed
    # (common random numbers), so an epoch's completions differ from the previous epoch's only where the
    # policy changed: with 60 completions an epoch, fresh draws moved a frozen policy's success rate by up
    # to 20 points between epochs, more than any update did (docs/learning.md at 88f971b, experiments R).
    redraw_samples: bool = True
    num_generations: int = 4  # G: completions per prompt (the normalisation group)
    # Prompts per optimisation step (G completions each). Lowered to a divisor of the epoch's prompt count
    # so that no prompt is dropped.
    prompts_per_step: int = 5
    # Optimisation steps served by one generation batch; None: the whole epoch is generated (and
    # evaluated) at once, which keeps a CPU's generate and the evaluator's batches large.
    steps_per_generation: int | None = None
    max_new_tokens: int = 384  # longest completion, in tokens
    temperature: float = 1.0  # sampling temperature
    learning_rate: float = 2e-4  # AdamW's learning rate, one optimizer carried across epochs
    iterations: int = 1  # GRPO's mu: optimisation passes over each generation batch (PPO-style clipping)
    # Train only on this top fraction of tokens by entropy (TRL's top_entropy_quantile): the forks where a
    # program goes right or wrong. 1.0: every token.
    top_entropy_quantile: float = 1.0
    beta: float = 0.0  # KL weight toward the starting policy; 0 needs no reference model
    clip: float = 1.5  # k: normalised rewards are clipped to [-k, k]
    # Correct programs whose speedups spread by no more than this (relative) are ties: reward 0 each.
    speedup_resolution: float = 0.0
    failure_reward: float = -2.0  # failed or malformed completions; must be <= -clip
    lora: bool = False  # LoRA adapters (peft) instead of a full fine-tune
    lora_r: int = 16  # LoRA rank
    lora_alpha: int = 32  # LoRA scaling
    gradient_checkpointing: bool = False  # memory for time, for large policies
    seed: int = 0  # sampling and exemplar draws
    prompts: PromptSettings = PromptSettings()  # how the prompts' exemplars are drawn
    # Generation through TRL's vLLM integration instead of model.generate (docs/learning.md at 88f971b, "Generation with
    # vLLM"): off by default, as on CPU. "server": completions come from a `trl vllm-serve` process at
    # vllm_server_host:vllm_server_port, which receives the policy's weights after each step; "colocate":
    # vLLM runs inside the trainer's process, on its GPU, with this fraction of the GPU's memory.
    use_vllm: bool = False
    vllm_mode: Literal["server", "colocate"] = "server"  # server or colocate (with use_vllm)
    vllm_server_host: str = "127.0.0.1"  # server mode: the host trl vllm-serve listens on
    vllm_server_port: int = 8000  # server mode: its port
    vllm_gpu_memory_utilization: float = 0.3  # colocate mode: the share of the GPU's memory vLLM takes

    def __post_init__(self) -> None:
        _positive(self, "epochs", "prompts_per_problem", "num_generations", "prompts_per_step", "max_new_tokens",
                  "learning_rate", "clip", "iterations")
        self._check_vllm()
        if self.num_generations < 2:
            raise ValueError("num_generations must be at least 2: GRPO compares completions within a group")
        if not 0 < self.top_entropy_quantile <= 1:
            raise ValueError(f"top_entropy_quantile={self.top_entropy_quantile}: use a fraction in (0, 1]")
        if self.steps_per_generation is not None and self.steps_per_generation < 1:
            raise ValueError(f"steps_per_generation={self.steps_per_generation}: use null (whole epoch) or >= 1")
        if self.failure_reward > -self.clip:
            raise ValueError(f"failure_reward={self.failure_reward} > -clip: a broken program would outscore a "
                             "correct one; set it at or below -clip")

    def _check_vllm(self) -> None:
        if self.vllm_mode not in ("server", "colocate"):
            raise ValueError(f"vllm_mode={self.vllm_mode!r}: use 'server' (a `trl vllm-serve` process at "
                             "vllm_server_host:vllm_server_port) or 'colocate' (vLLM inside the trainer's process)")
        if not self.vllm_server_host.strip():
            raise ValueError("vllm_server_host is empty: give the host `trl vllm-serve --host` listens on, "
                             "e.g. 127.0.0.1")
        if not 1 <= self.vllm_server_port <= 65535:
            raise ValueError(f"vllm_server_port={self.vllm_server_port}: use the port of `trl vllm-serve --port` "
                             "(1-65535)")
        if not 0 < self.vllm_gpu_memory_utilization <= 1:
            raise ValueError(f"vllm_gpu_memory_utilization={self.vllm_gpu_memory_utilization}: use the fraction "
                             "of the GPU's memory colocated vLLM may take, in (0, 1]")


def from_dict(cls: type, data: dict[str, Any] | None, base: Any = None) -> Any:
    """Build a settings dataclass from a params section; nested sections start from the outer default
    (``base``). Unknown keys are an error naming the known ones: a typo must not silently fall back to a
    default."""
    data = dict(data or {})
    known = {f.name for f in fields(cls)}
    unknown = set(data) - known
    if unknown:
        raise ValueError(f"{cls.__name__}: unknown keys {sorted(unknown)}; known keys are {sorted(known)}")
    base = base if base is not None else cls()
    values = {name: getattr(base, name) for name in known}
    for name, value in data.items():
        current = values[name]
        if isinstance(value, dict) and hasattr(current, "__dataclass_fields__"):
            value = from_dict(type(current), value, base=current)
        values[name] = value
    return cls(**values)
