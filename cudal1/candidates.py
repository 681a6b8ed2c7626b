"""Candidates (model outputs: a program defining ``ModelNew``) and evaluations (their measurement).

Records are plain frozen dataclasses so the GPU worker needs only torch; parquet I/O uses polars,
imported lazily where a table is read or written.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from cudal1.problems import sha256_text


class Status(str, enum.Enum):
    OK = "ok"  # built, correct on every trial and spot check, timed
    COMPILE_ERROR = "compile_error"  # does not parse, or its extension does not build
    RUNTIME_ERROR = "runtime_error"  # raised, crashed (segfault, os._exit, OOM) while loading or running
    INCORRECT = "incorrect"  # ran, but an output differs from the reference (or changed its inputs)
    TIMEOUT = "timeout"  # build, load or run exceeded its bound; the process group was killed
    REJECTED = "rejected"  # a static or dynamic integrity check caught a pattern that only serves to cheat


@dataclass(frozen=True)
class Candidate:
    """A program proposed for a problem. ``origin`` says who wrote it (``template:compile``, ``teacher:gpt``...)."""

    problem_id: str
    source: str
    origin: str = "unknown"
    candidate_id: str = ""
    # The author's Performance Analysis, where it wrote one (a teacher's answer, a file's column): the SFT
    # target of a corpus program carries it. Not part of the id: the program alone is what is measured.
    analysis: str = ""

    def __post_init__(self) -> None:
        if not self.candidate_id:
            object.__setattr__(self, "candidate_id", self.sha256[:16])

    @property
    def sha256(self) -> str:
        return sha256_text(self.source)


# Reason prefixes of evaluations that say nothing about the candidate: its problem's reference failed, or
# the evaluator itself did (e.g. its parent ran out of device memory). The flag is the prefix with "_".
REFERENCE_FAILED = "reference failed"
HARNESS_FAILED = "harness failed"


def harness_failed(status: str, reason: str) -> bool:
    """True when an evaluation failed because the harness did (the reference or the evaluator), not the
    program. Reads the reason, which pool entries keep (they do not keep flags).

    >>> harness_failed("runtime_error", "reference failed: p: reference failed to load: boom")
    True
    >>> harness_failed("runtime_error", "harness failed: OutOfMemoryError: CUDA out of memory")
    True
    >>> harness_failed("runtime_error", "ZeroDivisionError"), harness_failed("ok", "")
    (False, False)
    """
    return status != "ok" and reason.startswith((REFERENCE_FAILED, HARNESS_FAILED))


@dataclass(frozen=True)
class Evaluation:
    """The measurement of one candidate against one problem. Times in milliseconds, per forward call."""

    problem_id: str
    candidate_id: str
    status: Status
    reason: str = ""
    speedup: float | None = None  # reference_ms / candidate_ms, only when status is ok
    speedup_low: float | None = None  # 95% confidence interval of the median speedup over timing trials
    speedup_high: float | None = None
    reference_ms: float | None = None
    candidate_ms: float | None = None
    spread: float | None = None  # relative spread of per-trial speedups (trimmed max-min over median)
    trials: int = 0  # timing trials kept
    correctness_trials: int = 0
    max_abs_error: float | None = None
    max_rel_l2_error: float | None = None
    flags: tuple[str, ...] = ()  # non-fatal observations: "side_streams", "noisy", "degenerate_problem"...
    device: str = "cpu"
    device_name: str = ""
    config_hash: str = ""
    problem_sha256: str = ""
    candidate_sha256: str = ""
    build_s: float | None = None
    eval_s: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. wall-clock cross-check figures

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    def to_row(self) -> dict[str, Any]:
        row = asdict(self)
        row["status"] = self.status.value
        row["flags"] = list(self.flags)
        row["extra"] = json.dumps(self.extra, sort_keys=True)
        return row

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Evaluation:
        names = {f.name for f in fields(cls)}
        data = {k: v for k, v in row.items() if k in names}
        data["status"] = Status(data["status"])
        data["flags"] = tuple(data.get("flags") or ())
        extra = data.get("extra") or "{}"
        data["extra"] = json.loads(extra) if isinstance(extra, str) else dict(extra)
        return cls(**data)

    @property
    def harness_failed(self) -> bool:
        return harness_failed(self.status.value, self.reason)

    @property
    def key(self) -> tuple[str, str, str, str]:
        """What makes two evaluations the same measurement: resumable batches skip a known key."""
        return (self.problem_sha256, self.candidate_sha256, self.config_hash, self.device_name)


def candidates_to_parquet(candidates: Iterable[Candidate], path: str | Path) -> None:
    import polars as pl

    rows = [asdict(c) | {"sha256": c.sha256} for c in candidates]
    schema = {"problem_id": pl.String, "source": pl.String, "origin": pl.String, "candidate_id": pl.String,
              "analysis": pl.String, "sha256": pl.String}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    pl.DataFrame(rows, schema=schema).write_parquet(path)


def candidates_from_parquet(path: str | Path) -> list[Candidate]:
    import polars as pl

    df = pl.read_parquet(path)
    missing = {"problem_id", "source"} - set(df.columns)
    if missing:
        raise ValueError(f"{path}: candidate table lacks columns {sorted(missing)}; expected problem_id, source[, origin, candidate_id]")
    out = []
    for row in df.iter_rows(named=True):
        out.append(Candidate(row["problem_id"], row["source"], row.get("origin") or "unknown", row.get("candidate_id") or "",
                             row.get("analysis") or ""))
    return out


def evaluations_to_parquet(evaluations: Sequence[Evaluation], path: str | Path) -> None:
    import polars as pl

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    rows = [e.to_row() for e in evaluations]
    pl.DataFrame(rows, schema=evaluation_schema(), strict=False).write_parquet(path)


def evaluations_from_parquet(path: str | Path) -> list[Evaluation]:
    import polars as pl

    if not Path(path).exists():
        return []
    return [Evaluation.from_row(r) for r in pl.read_parquet(path).iter_rows(named=True)]


def evaluation_schema() -> dict[str, Any]:
    import polars as pl

    return {
        "problem_id": pl.String, "candidate_id": pl.String, "status": pl.String, "reason": pl.String,
        "speedup": pl.Float64, "speedup_low": pl.Float64, "speedup_high": pl.Float64, "reference_ms": pl.Float64, "candidate_ms": pl.Float64, "spread": pl.Float64,
        "trials": pl.Int64, "correctness_trials": pl.Int64, "max_abs_error": pl.Float64,
        "max_rel_l2_error": pl.Float64, "flags": pl.List(pl.String), "device": pl.String,
        "device_name": pl.String, "config_hash": pl.String, "problem_sha256": pl.String,
        "candidate_sha256": pl.String, "build_s": pl.Float64, "eval_s": pl.Float64, "extra": pl.String,
    }


def save_evaluations(evaluations: Sequence[Evaluation], path: str | Path) -> None:
    """Parquet (polars) or, for ``.jsonl``, JSON lines with the standard library only — the GPU
    evaluation worker has torch and this package, nothing else."""
    path = Path(path)
    if path.suffix == ".jsonl":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(e.to_row()) + "\n" for e in evaluations))
    else:
        evaluations_to_parquet(evaluations, path)


def load_evaluations(path: str | Path) -> list[Evaluation]:
    path = Path(path)
    if not path.exists():
        return []
    if path.suffix == ".jsonl":
        return [Evaluation.from_row(json.loads(line)) for line in path.read_text().splitlines() if line.strip()]
    return evaluations_from_parquet(path)
