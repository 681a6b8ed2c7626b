"""What one `cudal1 optimize` run holds while it runs (:class:`RunState`), its settings, and how its
candidates are ranked: shared by the rounds (:mod:`cudal1.optimize.loop`) and the outputs written after each
(:mod:`cudal1.optimize.outputs`)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from cudal1.candidates import Candidate, Evaluation
from cudal1.evaluator.config import EvalConfig
from cudal1.optimize.models import CachedWriter
from cudal1.optimize.module import UserModule
from cudal1.pool import CandidatePool
from cudal1.training.settings import PromptSettings

VARIANTS = ("no_grad", "inference_mode", "channels_last", "cuda_graph")
NO_MODEL_HINT = ("no model is configured, so only the template teacher's rewrites were tried; a model endpoint "
                 "(--endpoint URL --model NAME, e.g. a vLLM server) writes real kernels and gives better results")


@dataclass(frozen=True)
class OptimizeSettings:
    rounds: int = 3
    samples: int = 4  # answers per model per round
    budget_s: float | None = None  # wall-clock seconds for the whole run; None: no limit
    variants: tuple[str, ...] = VARIANTS
    compile_modes: tuple[str, ...] = ()  # torch.compile builds for minutes on a CPU: opt in
    prompts: PromptSettings = field(default_factory=PromptSettings)
    chunk: int = 4  # candidates per evaluator batch: the budget is checked between batches
    seed: int = 0
    patience: int = 1  # rounds in a row with nothing faster before the run stops

    def __post_init__(self) -> None:
        if self.rounds < 1 or self.samples < 1 or self.chunk < 1 or self.patience < 1:
            raise ValueError(f"rounds={self.rounds}, samples={self.samples}, patience={self.patience}: "
                             "each must be at least 1")
        if self.budget_s is not None and self.budget_s <= 0:
            raise ValueError(f"budget_s={self.budget_s}: give a positive number of seconds, or none")


@dataclass(frozen=True)
class Entry:
    """One candidate of the run: the round it first appeared in; ``malformed`` holds why a model's answer
    had no program (its raw text is the candidate's source then, and nothing is evaluated)."""

    candidate: Candidate
    round: int
    malformed: str = ""


@dataclass
class RunState:
    module: UserModule
    config: EvalConfig
    writers: list[CachedWriter]
    settings: OptimizeSettings
    out_dir: Path
    command: str
    started: float = field(default_factory=time.monotonic)
    entries: dict[str, Entry] = field(default_factory=dict)  # by source sha256, in order of appearance
    evaluations: dict[str, Evaluation] = field(default_factory=dict)  # by source sha256
    reused: set[str] = field(default_factory=set)  # measured by an earlier run
    pool: CandidatePool = field(default_factory=CandidatePool)
    prompts: list[dict] = field(default_factory=list)
    replies: dict[str, list[int]] = field(default_factory=dict)  # origin -> [answers, programs]
    messages: list[str] = field(default_factory=list)
    rounds_done: int = 0
    measured_now: int = 0
    stop: str = ""
    failure: str = ""  # a model that could not be asked: the run ends after its round
    budget_hit: bool = False
    interrupted: bool = False

    @property
    def results_path(self) -> Path:
        return self.out_dir / "evaluations.parquet"

    def spent(self) -> bool:
        budget = self.settings.budget_s
        return budget is not None and time.monotonic() - self.started >= budget


def rank_key(e: Evaluation | None) -> float:
    """What ranks a passing candidate: the low end of its speedup's 95% interval, the speed it surely has."""
    if e is None or not e.ok or e.speedup is None:
        return float("-inf")
    return e.speedup_low if e.speedup_low is not None else e.speedup


def no_program_messages(state: RunState) -> list[str]:
    """One message per model whose answers never held a program."""
    out = []
    for origin, (answers, programs) in state.replies.items():
        if answers and not programs:
            first = next((e.candidate.source for e in state.entries.values()
                          if e.candidate.origin == origin and e.malformed), "")
            shown = " ".join(first.split())[:120]
            out.append(f"{origin} returned no program in {answers} answers (the first began: {shown!r}); it must "
                       "answer with a fenced python block defining class ModelNew: try --api chat/completions, a "
                       "larger --max-tokens, or a stronger model")
    return out
