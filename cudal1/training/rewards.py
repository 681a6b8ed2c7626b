"""Reward functions in TRL's contract ``(completions, **columns) -> list[float | None]``.

The contrastive-RL reward (CUDA-L1 §2.4.4-2.4.5): parse the completion, evaluate its program, take the
measured speedup, normalise it within the group of completions that share a prompt, clip to [−k, k].
A completion that yields no evaluable program, or whose program fails (compile error, runtime error,
incorrect, timeout, rejected), gets a fixed ``failure_reward`` below −k, so a correct program always
outscores a broken one. Every evaluation joins the candidate pool, which is also the cache: a program
already in the pool is never evaluated again.

An evaluation whose *reference* failed (the evaluator's ``reference failed: ...`` reason: the harness could
not run the problem) says nothing about the completion: it gets ``None`` (TRL's "not applicable": the
completion is left out of its group's baseline and its advantage is 0), is kept out of the pool and the
cache (the next sight of the program evaluates it again) and out of the epoch's success rate.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cudal1.candidates import Candidate, Evaluation, harness_failed
from cudal1.pool import CandidatePool, PoolEntry
from cudal1.problems import Problem
from cudal1.prompts import parse_response

# (problems, candidates) -> one evaluation per candidate, in order; cudal1.evaluator.evaluate_many fits.
EvaluateFn = Callable[[Sequence[Problem], Sequence[Candidate]], list[Evaluation]]

MALFORMED = "malformed"


def normalise_group(scores: Sequence[float | None]) -> list[float | None]:
    """z-scores of the non-None scores; None stays None. A group with fewer than two scores, or no
    spread, gets 0 for each score (nothing to prefer).

    >>> normalise_group([1.0, 3.0, None])
    [-1.0, 1.0, None]
    >>> normalise_group([2.0, None])
    [0.0, None]
    """
    present = [s for s in scores if s is not None]
    if len(present) < 2 or statistics.pstdev(present) < 1e-12:
        return [None if s is None else 0.0 for s in scores]
    mean, std = statistics.fmean(present), statistics.pstdev(present)
    return [None if s is None else (s - mean) / std for s in scores]


def group_rewards(speedups: Sequence[float | None], clip: float = 1.5, failure_reward: float = -2.0,
                  resolution: float = 0.0) -> list[float]:
    """Rewards for one group: speedups of correct programs normalised, then clipped to [−clip, clip];
    ``None`` (failed or malformed) gets ``failure_reward``. When the correct programs' speedups spread by
    no more than ``resolution`` (relative: (max − min) / median), they are ties and all get 0.

    Without that, a group of equally fast programs is ranked by timing noise, and normalisation blows
    the noise up to advantages of ±1: measured on the tiny policy, that alone raised its entropy and
    lowered its success rate epoch after epoch.

    >>> [round(r, 2) for r in group_rewards([1.0, 1.0, 1.0, 10.0, None], clip=1.5)]  # z(10.0) = 1.73
    [-0.58, -0.58, -0.58, 1.5, -2.0]
    >>> group_rewards([0.93, 0.97, 1.02, None], resolution=0.15)  # 9% apart: within the noise
    [0.0, 0.0, 0.0, -2.0]
    >>> group_rewards([None, None])
    [-2.0, -2.0]
    """
    present = [s for s in speedups if s is not None]
    if present and (max(present) - min(present)) <= resolution * statistics.median(present):
        return [failure_reward if s is None else 0.0 for s in speedups]
    return [failure_reward if z is None else max(-clip, min(clip, z)) for z in normalise_group(speedups)]


def completion_text(completion: Any) -> str:
    """TRL passes strings for plain prompts and message lists for conversational ones."""
    if isinstance(completion, str):
        return completion
    return "".join(m.get("content", "") for m in completion if isinstance(m, dict))


@dataclass(frozen=True)
class RewardRecord:
    """One rewarded completion, kept for the epoch's metrics."""

    problem_id: str
    status: str
    speedup: float | None
    reward: float | None  # None: not scored (the reference failed)
    cached: bool
    format_errors: int


class SpeedupReward:
    """The contrastive-RL reward, a callable object in TRL's contract.

    Needs a ``problem_id`` dataset column. Completions sharing a prompt form a group. With
    ``require_analysis`` (the learning stages) a response must parse into a Performance Analysis and a
    program: one without the analysis is malformed, never evaluated, and gets ``failure_reward``.

    >>> from cudal1.candidates import Status
    >>> def toy_evaluate(problems, candidates):  # stands in for the evaluator: speedup = 1 + len(code)/100
    ...     return [Evaluation(c.problem_id, c.candidate_id, Status.OK, speedup=1 + len(c.source) / 100)
    ...             for c in candidates]
    >>> reward = SpeedupReward({"p": Problem("p", 1, "p", "class Model: ...")}, toy_evaluate, CandidatePool())
    >>> ok = "## Code Implementation\\n```python\\nclass ModelNew: pass\\n```"
    >>> long = "## Code Implementation\\n```python\\nclass ModelNew: pass  # a longer program\\n```"
    >>> [round(r, 6) for r in reward([ok, long, "no code"], prompts=["q"] * 3, problem_id=["p"] * 3)]
    [-1.0, 1.0, -2.0]
    >>> [round(r, 6) for r in reward([long, "no code"], prompts=["q"] * 2, problem_id=["p"] * 2)]
    [0.0, -2.0]
    >>> len(reward.pool), reward.evaluated  # the second call was served from the pool
    (2, 2)
    >>> def broken_harness(problems, candidates):
    ...     return [Evaluation(c.problem_id, c.candidate_id, Status.RUNTIME_ERROR, reason="reference failed: x")
    ...             for c in candidates]
    >>> SpeedupReward({"p": Problem("p", 1, "p", "class Model: ...")}, broken_harness, CandidatePool())(
    ...     [ok, "no code"], prompts=["q"] * 2, problem_id=["p"] * 2)
    [None, -2.0]
    """

    __name__ = "speedup_reward"  # TRL names a reward column after the callable

    def __init__(
        self,
        problems: Mapping[str, Problem],
        evaluate: EvaluateFn,
        pool: CandidatePool,
        *,
        clip: float = 1.5,
        failure_reward: float = -2.0,
        pool_path: str | Path | None = None,
        cache: CandidatePool | None = None,
        cache_path: str | Path | None = None,
        stage: str = "rl",
        admit: str = "all",
        admit_margin: float = 0.0,
        resolution: float = 0.0,
        require_analysis: bool = False,
    ) -> None:
        if clip <= 0:
            raise ValueError(f"clip={clip}: must be positive (the paper uses k = 1.5)")
        if failure_reward > -clip:
            raise ValueError(f"failure_reward={failure_reward} > -clip={-clip}: a broken program would outscore a "
                             "correct one; use a value at or below -clip")
        self.problems, self.evaluate, self.pool = dict(problems), evaluate, pool
        self.clip, self.failure_reward = clip, failure_reward
        self.pool_path = Path(pool_path) if pool_path is not None else None
        # ``cache``: measurements from earlier runs under the same protocol. A hit joins the pool without
        # an evaluation; the pool itself holds what this run has seen (its exemplars come from it).
        self.cache = cache
        self.cache_path = Path(cache_path) if cache_path is not None else None
        self.stage, self.admit, self.admit_margin, self.resolution = stage, admit, admit_margin, resolution
        self.require_analysis = require_analysis
        self.evaluated = 0  # evaluator calls made by this object (the cache's counterpart)
        self.history: list[RewardRecord] = []

    def __call__(self, completions: Sequence[Any], prompts: Sequence[Any] | None = None,
                 problem_id: Sequence[str] | None = None, **_: Any) -> list[float | None]:
        if problem_id is None:
            raise ValueError("SpeedupReward needs a `problem_id` column in the training dataset")
        parsed = [parse_response(completion_text(c)) for c in completions]
        entries, fresh = self._entries(parsed, problem_id)
        speedups = [e.speedup if e is not None and e.ok else None for e in entries]
        unscored = {i for i, e in enumerate(entries) if e is not None and harness_failed(e.status, e.reason)}
        groups: dict[str, list[int]] = {}
        for i in range(len(completions)):
            if i not in unscored:  # left out of its group: it must not shift the others' normalisation
                groups.setdefault(str(prompts[i]) if prompts is not None else "all", []).append(i)
        rewards: list[float | None] = [None] * len(completions)
        for members in groups.values():
            group = group_rewards([speedups[i] for i in members], self.clip, self.failure_reward, self.resolution)
            for i, r in zip(members, group, strict=True):
                rewards[i] = r
        for i, (p, e) in enumerate(zip(parsed, entries, strict=True)):
            status = e.status if e is not None else MALFORMED
            cached = e is not None and e.key not in fresh
            self.history.append(RewardRecord(problem_id[i], status, speedups[i], rewards[i], cached, len(p.errors)))
        return rewards

    def _admits(self, problem_id: str, speedup: float | None) -> bool:
        return self.pool.admits(problem_id, speedup, self.admit, self.admit_margin)

    def _entries(self, parsed: Sequence[Any], problem_ids: Sequence[str]
                 ) -> tuple[list[PoolEntry | None], set[tuple[str, str]]]:
        """Pool entries for the evaluable programs (None for the rest), evaluating only what the pool has
        not seen; also the keys evaluated by this call."""
        candidates: list[Candidate | None] = []
        for p, pid in zip(parsed, problem_ids, strict=True):
            if pid not in self.problems:
                raise KeyError(f"problem_id {pid!r} is not among the {len(self.problems)} problems given")
            evaluable = p.analysed if self.require_analysis else p.ok
            candidates.append(Candidate(pid, p.code, origin=self.stage) if evaluable else None)
        todo: dict[tuple[str, str], Candidate] = {}
        for c in candidates:
            key = (c.problem_id, c.sha256) if c is not None else None
            if c is None or key in self.pool:
                continue
            known = self.cache.get(*key) if self.cache is not None else None
            if known is not None and harness_failed(known.status, known.reason):
                known = None  # a harness failure cached by an older run: measure the program again
            if known is not None:  # the cache lends its measurement; who wrote the program is this run's
                self.pool.add(replace(known, candidate_id=c.candidate_id, origin=c.origin, stage=self.stage,
                                      exemplar=self._admits(c.problem_id, known.speedup)))
            else:
                todo.setdefault(key, c)
        unpooled: dict[tuple[str, str], PoolEntry] = {}  # this call's harness failures
        if todo:
            batch = list(todo.values())
            evaluations = self.evaluate([self.problems[c.problem_id] for c in batch], batch)
            self.evaluated += len(batch)
            for c, ev in zip(batch, evaluations, strict=True):
                entry = PoolEntry.from_evaluation(c, ev, self.stage)
                if harness_failed(entry.status, entry.reason):
                    unpooled[entry.key] = entry  # not the program's result: neither pooled nor cached
                    continue
                self.pool.add(replace(entry, exemplar=self._admits(c.problem_id, ev.speedup)))
                if self.cache is not None:
                    self.cache.add(entry)
            if self.cache is not None and self.cache_path is not None:
                self.cache.save(self.cache_path)
        if self.pool_path is not None:
            self.pool.save(self.pool_path)  # after every batch: a crash loses no evaluation
        entries = [None if c is None else self.pool.get(c.problem_id, c.sha256) or unpooled[(c.problem_id, c.sha256)]
                   for c in candidates]
        return entries, set(todo)


def epoch_metrics(records: Sequence[RewardRecord]) -> dict[str, float]:
    """Per-epoch numbers: mean/max reward, success rate, mean/median speedup of correct programs. Rewards
    and the success rate count scored completions only (not those whose reference failed).

    >>> m = epoch_metrics([RewardRecord("p", "ok", 2.0, 1.0, False, 0), RewardRecord("p", "malformed", None, -2.0, False, 1)])
    >>> m["mean_reward"], m["success_rate"], m["median_speedup"]
    (-0.5, 0.5, 2.0)
    """
    if not records:
        return {}
    scored = [r for r in records if r.reward is not None]
    speedups = [r.speedup for r in scored if r.speedup is not None]
    rewards = [r.reward for r in scored if r.reward is not None]
    return {
        "mean_reward": statistics.fmean(rewards) if rewards else math.nan,
        "max_reward": max(rewards) if rewards else math.nan,
        "success_rate": len(speedups) / len(scored) if scored else math.nan,
        "mean_speedup": statistics.fmean(speedups) if speedups else math.nan,
        "median_speedup": statistics.median(speedups) if speedups else math.nan,
        "max_speedup": max(speedups) if speedups else math.nan,
        "well_formed_rate": sum(r.format_errors == 0 for r in records) / len(records),
        "cached_rate": sum(r.cached for r in records) / len(records),
        "harness_failed_rate": (len(records) - len(scored)) / len(records),
        "completions": float(len(records)),
    }
