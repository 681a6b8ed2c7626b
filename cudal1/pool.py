"""The candidate pool: every evaluated candidate per problem, and the bucketed exemplar sampling of
CUDA-L1 §2.4.3.

Correct candidates are grouped into score buckets ``[k·Δs, (k+1)·Δs)`` by speedup. A prompt shows N
exemplars from N different buckets; bucket b is drawn with probability ∝ exp((mean_b − μ)/τ), μ being
the mean speedup of the problem's correct candidates, and a candidate is drawn uniformly inside it.

The pool is also the reward's cache: a candidate already in it (same problem, same source hash) is never
evaluated again, which is what lets a resumed RL stage skip the work it already did.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from cudal1.candidates import Candidate, Evaluation, Status
from cudal1.prompts import Exemplar


@dataclass(frozen=True)
class PoolEntry:
    problem_id: str
    candidate_id: str
    sha256: str
    source: str
    origin: str
    status: str  # a cudal1.candidates.Status value, or "malformed" when nothing could be evaluated
    speedup: float | None = None
    reason: str = ""
    stage: str = ""  # which stage added it: "corpus", "contrastive_rl"...
    exemplar: bool = True  # may be shown in prompts (see CandidatePool.admits)
    analysis: str = ""  # the author's Performance Analysis, where it wrote one (corpus programs)

    @property
    def ok(self) -> bool:
        return self.status == Status.OK.value and self.speedup is not None

    @property
    def key(self) -> tuple[str, str]:
        return (self.problem_id, self.sha256)

    @classmethod
    def from_evaluation(cls, candidate: Candidate, evaluation: Evaluation, stage: str = "",
                        exemplar: bool = True) -> PoolEntry:
        return cls(candidate.problem_id, candidate.candidate_id, candidate.sha256, candidate.source,
                   candidate.origin, evaluation.status.value, evaluation.speedup, evaluation.reason, stage, exemplar,
                   candidate.analysis)


_SCHEMA = {"problem_id": "String", "candidate_id": "String", "sha256": "String", "source": "String",
           "origin": "String", "status": "String", "speedup": "Float64", "reason": "String", "stage": "String",
           "exemplar": "Boolean", "analysis": "String"}


def bucket_of(speedup: float, width: float) -> int:
    """Index of the bucket ``[k·width, (k+1)·width)`` holding ``speedup``.

    >>> bucket_of(1.0, 0.25), bucket_of(1.24, 0.25), bucket_of(1.25, 0.25)
    (4, 4, 5)
    """
    return math.floor(speedup / width + 1e-9)


def bucket_probabilities(entries: Sequence[PoolEntry], width: float, temperature: float) -> dict[int, float]:
    """P(bucket) ∝ exp((mean_b − μ)/τ) over the buckets of ``entries`` (correct ones only)."""
    if width <= 0 or temperature <= 0:
        raise ValueError(f"bucket width {width} and temperature {temperature} must both be positive")
    scores: dict[int, list[float]] = defaultdict(list)
    for e in entries:
        if e.ok:
            scores[bucket_of(e.speedup, width)].append(e.speedup)  # type: ignore[arg-type]
    if not scores:
        return {}
    mu = sum(s for v in scores.values() for s in v) / sum(len(v) for v in scores.values())
    logits = {b: (sum(v) / len(v) - mu) / temperature for b, v in scores.items()}
    top = max(logits.values())  # subtract the max: exp never overflows, ratios are unchanged
    weights = {b: math.exp(x - top) for b, x in logits.items()}
    total = sum(weights.values())
    return {b: w / total for b, w in sorted(weights.items())}


class CandidatePool:
    """All evaluated candidates, keyed by (problem_id, source sha256)."""

    def __init__(self, entries: Iterable[PoolEntry] = ()) -> None:
        self._entries: dict[tuple[str, str], PoolEntry] = {}
        for e in entries:
            self.add(e)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: tuple[str, str]) -> bool:
        return key in self._entries

    def get(self, problem_id: str, sha256: str) -> PoolEntry | None:
        return self._entries.get((problem_id, sha256))

    def add(self, entry: PoolEntry) -> bool:
        """Add unless the key is known; the first measurement stands. Returns whether it was new."""
        if entry.key in self._entries:
            return False
        self._entries[entry.key] = entry
        return True

    def entries(self, problem_id: str | None = None) -> list[PoolEntry]:
        return [e for e in self._entries.values() if problem_id is None or e.problem_id == problem_id]

    def successes(self, problem_id: str) -> list[PoolEntry]:
        return [e for e in self.entries(problem_id) if e.ok]

    def exemplars(self, problem_id: str) -> list[PoolEntry]:
        """The correct candidates prompts may show."""
        return [e for e in self.entries(problem_id) if e.ok and e.exemplar]

    def admits(self, problem_id: str, speedup: float | None, rule: str, margin: float = 0.0) -> bool:
        """Whether a new correct candidate becomes an exemplar. ``all``: every correct one (the paper's
        database). ``improving``: only one faster than every exemplar of its problem so far by more than
        ``margin`` (relative; set it above the scatter of the protocol's timings), so later prompts
        contrast better programs without filling up with the policy's own near-copies that measured
        faster by chance. Measured on the tiny policy: those near-copies made each RL epoch's prompts
        harder than the last's (success 82% -> 73% -> 62% with the weights frozen); with a 15% margin one
        no_grad copy timed at 1.22x still got in and its problem went from 8/8 correct to 0/8."""
        if speedup is None:
            return False
        if rule == "all":
            return True
        if rule != "improving":
            raise ValueError(f"exemplar admission {rule!r}: use 'all' or 'improving'")
        best = max((e.speedup for e in self.exemplars(problem_id)), default=0.0)  # type: ignore[type-var]
        return speedup > best * (1.0 + margin)

    def sample_exemplars(
        self, problem_id: str, rng: random.Random, n: int = 2, width: float = 0.25, temperature: float = 0.5,
    ) -> list[Exemplar]:
        """N exemplars from N different buckets (fewer buckets: the rest drawn uniformly among the remaining
        correct candidates, so a prompt still contrasts two programs when it can). Ordered by speedup,
        slowest first, so the prompt reads as a progression."""
        ok = sorted(self.exemplars(problem_id), key=lambda e: e.sha256)  # a stable order for the rng
        members: dict[int, list[PoolEntry]] = defaultdict(list)
        for e in ok:
            members[bucket_of(e.speedup, width)].append(e)  # type: ignore[arg-type]
        left, chosen = ok, list[PoolEntry]()
        while left and len(chosen) < n:
            # each draw's probabilities from the buckets still left, not the first draw's less those taken:
            # beside a bucket far ahead (a 528x release program among ~1x rewrites) the others' underflow to 0
            buckets, weights = zip(*bucket_probabilities(left, width, temperature).items(), strict=True)
            b = rng.choices(buckets, weights=weights)[0]
            chosen.append(rng.choice(members[b]))
            left = [e for e in left if bucket_of(e.speedup, width) != b]  # type: ignore[arg-type]
        rest = [e for e in ok if e not in chosen]
        while rest and len(chosen) < n:
            chosen.append(rest.pop(rng.randrange(len(rest))))
        return [Exemplar(e.source, float(e.speedup)) for e in sorted(chosen, key=lambda e: e.speedup)]  # type: ignore[arg-type]

    def save(self, path: str | Path) -> None:
        import polars as pl

        schema = {k: getattr(pl, v) for k, v in _SCHEMA.items()}
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(path).with_suffix(".tmp.parquet")
        # Write then rename: an interrupted save never leaves a half-written pool behind.
        pl.DataFrame([asdict(e) for e in self._entries.values()], schema=schema).write_parquet(tmp)
        tmp.replace(path)

    @classmethod
    def load(cls, path: str | Path) -> CandidatePool:
        """The pool at ``path``, or an empty one when the file does not exist yet."""
        import polars as pl

        if not Path(path).exists():
            return cls()
        return cls(PoolEntry(**row) for row in pl.read_parquet(path).iter_rows(named=True))

    def stats(self) -> dict[str, float]:
        ok = [e for e in self._entries.values() if e.ok]
        return {"pool_size": float(len(self)), "pool_correct": float(len(ok)),
                "pool_best_speedup": max((e.speedup for e in ok), default=0.0)}  # type: ignore[type-var]
