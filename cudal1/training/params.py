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
    problems: str = "data/problems/problems.parquet"  # input: the problems table
    corpus: str = "data/augment/corpus.parquet"  # the tiny policy's tokenizer learns from these programs
    out_dir: str = "models/policy"  # output: the policy, or a pointer to the model named


@dataclass(frozen=True)
class SFTParams(FinetuneSettings):
    problems: str = "data/problems/problems.parquet"  # input: the problems table
    corpus: str = "data/augment/corpus.parquet"  # input: the augment corpus (programs with speedups)
    policy: str = "models/policy"  # input: the policy to fine-tune
    out_dir: str = "models/sft"  # output: the fine-tuned policy
    prompts: PromptSettings = field(default_factory=PromptSettings)  # how each example's exemplars are drawn
    copies: int = 2  # each corpus program appears this often, with freshly drawn exemplars each time
    plots: str = "reports/learning/sft_loss.csv"  # loss per step, for dvc plots

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.copies < 1:
            raise ValueError(f"copies={self.copies}: use 1 or more")


@dataclass(frozen=True)
class SelfSupervisedParams(SelfSupervisedSettings):
    problems: str = "data/problems/problems.parquet"  # input: the problems table
    corpus: str = "data/augment/corpus.parquet"  # input: the augment corpus
    policy: str = "models/sft"  # input: the SFT policy
    out_dir: str = "models/self_supervised"  # output: the policy after the last round
    data_dir: str = "data/self_supervised"  # samples-round-N.parquet and pool.parquet
    devices: tuple[str, ...] = ("cpu",)  # where the samples are evaluated: cpu or cuda:N
    # The rounds' light protocol: it only has to tell correct from not.
    protocol: EvalConfig = field(default_factory=learning_protocol)
    pool_cache: str = "data/cache/learning-pool.parquet"  # measurements shared by the learning stages
    plots: str = "reports/learning/self_supervised_rounds.csv"  # success rate per round, for dvc plots


@dataclass(frozen=True)
class ContrastiveRLParams(RLSettings):
    problems: str = "data/problems/problems.parquet"  # input: the problems table
    pool: str = "data/self_supervised/pool.parquet"  # the starting pool: corpus + self-supervised samples
    policy: str = "models/self_supervised"  # input: the starting policy
    out_dir: str = "models/contrastive_rl"  # output: the trained policy
    data_dir: str = "data/contrastive_rl"  # pool.parquet: every candidate evaluated, with its speedup
    # Where the reward's evaluations run: cpu or cuda:N (cuda:<LOCAL_RANK> under several processes).
    devices: tuple[str, ...] = ("cpu",)
    # The reward's light protocol: it only ranks completions within a group.
    protocol: EvalConfig = field(default_factory=learning_protocol)
    # Measurements shared by the learning stages, kept across runs.
    pool_cache: str = "data/cache/learning-pool.parquet"
    work_dir: str = "data/cache/contrastive_rl"  # per-run epoch checkpoints: a rerun resumes from them
    plots: str = "reports/rl_epochs.csv"  # mean reward and success rate per epoch, for dvc plots
    metrics: str = "reports/rl_metrics.json"  # the last epoch's figures, for `dvc metrics show` / `dvc exp show`
    registered_model: str = "cudal1-policy"  # each run's policy becomes a new version of this MLflow model


__all__ = [
    "ContrastiveRLParams", "PolicyParams", "SFTParams", "SamplingSettings", "SelfSupervisedParams",
    "learning_protocol",
]
