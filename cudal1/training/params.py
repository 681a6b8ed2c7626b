"""``params.yaml`` sections of the learning stages. Each extends the core settings its stage's functions
take (a ``SFTParams`` *is* a ``FinetuneSettings``) with the stage's inputs and outputs, so a section stays
flat in YAML and the core never sees a path it does not need. Registered in ``cudal1.config.SECTIONS``;
relative paths are resolved against the params file's folder by ``cudal1.config.load_params``."""

from __future__ import annotations

from dataclasses import dataclass, field

from cudal1.evaluator.config import EvalConfig
from cudal1.training.settings import (
    FinetuneSettings,
    PolicySettings,
    PromptSettings,
    RLSettings,
    SamplingSettings,
    SelfSupervisedSettings,
)


def learning_protocol() -> EvalConfig:
    """The evaluation protocol of the learning stages on CPU: fewer trials than the reported numbers'
    protocol, because every RL step waits for it. Speedups reported by the `evaluate` stage use the full
    protocol; these only rank the completions of a group."""
    return EvalConfig(correctness_trials=2, timing_trials=3, target_trial_ms=10.0, warmup_iters=1, remeasure=0,
                      cpu_threads=1)


@dataclass(frozen=True)
class PolicyParams(PolicySettings):
    problems: str = "data/problems/problems.parquet"
    corpus: str = "data/augment/corpus.parquet"  # the tiny policy's tokenizer learns from these programs
    out_dir: str = "models/policy"


@dataclass(frozen=True)
class SFTParams(FinetuneSettings):
    problems: str = "data/problems/problems.parquet"
    corpus: str = "data/augment/corpus.parquet"
    policy: str = "models/policy"
    out_dir: str = "models/sft"
    prompts: PromptSettings = field(default_factory=PromptSettings)
    copies: int = 2  # each corpus program appears this often, with freshly drawn exemplars each time
    plots: str = "reports/learning/sft_loss.csv"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.copies < 1:
            raise ValueError(f"copies={self.copies}: use 1 or more")


@dataclass(frozen=True)
class SelfSupervisedParams(SelfSupervisedSettings):
    problems: str = "data/problems/problems.parquet"
    corpus: str = "data/augment/corpus.parquet"
    policy: str = "models/sft"
    out_dir: str = "models/self_supervised"
    data_dir: str = "data/self_supervised"  # samples-round-N.parquet and pool.parquet
    devices: tuple[str, ...] = ("cpu",)
    protocol: EvalConfig = field(default_factory=learning_protocol)
    pool_cache: str = "data/cache/learning-pool.parquet"  # measurements shared by the learning stages
    plots: str = "reports/learning/self_supervised_rounds.csv"


@dataclass(frozen=True)
class ContrastiveRLParams(RLSettings):
    problems: str = "data/problems/problems.parquet"
    pool: str = "data/self_supervised/pool.parquet"  # the starting pool: corpus + self-supervised samples
    policy: str = "models/self_supervised"
    out_dir: str = "models/contrastive_rl"
    data_dir: str = "data/contrastive_rl"  # pool.parquet: every candidate evaluated, with its speedup
    devices: tuple[str, ...] = ("cpu",)
    protocol: EvalConfig = field(default_factory=learning_protocol)
    pool_cache: str = "data/cache/learning-pool.parquet"
    work_dir: str = "data/cache/contrastive_rl"  # per-run epoch checkpoints: a rerun resumes from them
    plots: str = "reports/rl_epochs.csv"
    metrics: str = "reports/rl_metrics.json"  # the last epoch's figures, for `dvc metrics show` / `dvc exp show`
    registered_model: str = "cudal1-policy"  # each run's policy becomes a new version of this MLflow model


__all__ = [
    "ContrastiveRLParams", "PolicyParams", "SFTParams", "SamplingSettings", "SelfSupervisedParams",
    "learning_protocol",
]
