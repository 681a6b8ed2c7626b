"""CUDA-L1 stage 1 (data augmentation) without the orchestration: sample teachers in rounds until each
problem has enough correct candidates, keep every completion so an interrupted run resumes, and turn the
evaluated candidates into the training corpus.

The sampling and the evaluation are callables handed in by the caller (a Prefect flow maps them over
tasks; a test can pass plain functions), so this module never touches a network or a device itself.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cudal1.candidates import Candidate, Evaluation
from cudal1.evaluator.config import EvalConfig
from cudal1.problems import Problem

Sampler = Callable[[Sequence[tuple[Problem, int]]], list[str]]  # (problem, sample index) -> completion text
Evaluator = Callable[[Sequence[Candidate]], list[Evaluation]]


@dataclass
class TeacherTally:
    """How far one teacher got on one problem."""

    samples: int = 0
    successes: int = 0


def plan_round(tallies: dict[str, TeacherTally], samples_per_problem: int, stop_after: int) -> dict[str, int]:
    """How many samples each unfinished problem gets next: as many as successes are still missing,
    never more than its remaining budget (CUDA-L1: up to 20 attempts, stop after 2 successes).

    >>> plan_round({"a": TeacherTally(0, 0), "b": TeacherTally(3, 2), "c": TeacherTally(19, 0)}, 20, 2)
    {'a': 2, 'c': 1}
    """
    plan = {}
    for pid, tally in tallies.items():
        want = min(stop_after - tally.successes, samples_per_problem - tally.samples)
        if want > 0:
            plan[pid] = want
    return plan


def run_teacher(
    problems: Sequence[Problem],
    sample: Sampler,
    evaluate: Evaluator,
    origin: str,
    samples_per_problem: int,
    stop_after: int,
    extract: Callable[[str], str | None],
) -> tuple[list[Candidate], list[Evaluation]]:
    """Sample ``origin`` round by round; each round's candidates are evaluated together. A completion
    with no program still becomes a candidate (its raw text), so the evaluator records the failure and
    the self-supervised stage sees it as a zero-reward sample."""
    by_id = {p.problem_id: p for p in problems}
    tallies = {p.problem_id: TeacherTally() for p in problems}
    candidates: list[Candidate] = []
    evaluations: list[Evaluation] = []
    while plan := plan_round(tallies, samples_per_problem, stop_after):
        requests = [(by_id[pid], tallies[pid].samples + i) for pid, n in plan.items() for i in range(n)]
        texts = sample(requests)
        batch = [Candidate(p.problem_id, extract(t) or t, origin, analysis=analysis_of(t))
                 for (p, _), t in zip(requests, texts, strict=True)]
        results = evaluate(batch)
        for pid, n in plan.items():
            tallies[pid].samples += n
        ok = {e.candidate_id for e in results if e.ok}
        for c in batch:
            tallies[c.problem_id].successes += c.candidate_id in ok
        candidates += batch
        evaluations += results
    return candidates, evaluations


def analysis_of(text: str) -> str:
    """The Performance Analysis a teacher wrote before its program ('' where it wrote none).

    >>> analysis_of("## Performance Analysis\\nThe sum reads x twice.\\n## Code Implementation\\n```python\\nx\\n```")
    'The sum reads x twice.'
    """
    from cudal1.prompts.parser import parse_response

    return parse_response(text).analysis


class CompletionCache:
    """Append-only JSONL of completions keyed by (endpoint settings, prompt): a re-run after a crash or
    a dead endpoint reuses every answer it already paid for instead of asking again."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.lock = threading.Lock()
        self.entries: dict[str, list[str]] = {}
        if self.path.exists():
            for line in self.path.read_text().splitlines():
                if line.strip():
                    row = json.loads(line)
                    self.entries.setdefault(row["key"], []).append(row["text"])

    @staticmethod
    def key(settings: dict, prompt: str) -> str:
        payload = json.dumps(settings, sort_keys=True) + "\n" + prompt
        return hashlib.sha256(payload.encode()).hexdigest()[:24]

    def get(self, key: str, index: int) -> str | None:
        texts = self.entries.get(key, [])
        return texts[index] if index < len(texts) else None

    def add(self, key: str, text: str) -> None:
        with self.lock:
            self.entries.setdefault(key, []).append(text)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a") as f:
                f.write(json.dumps({"key": key, "text": text}) + "\n")


def device_names(devices: Sequence[str]) -> set[str]:
    from cudal1.evaluator.workers import device_name

    return {device_name(d) for d in devices}


def select_measured(
    rows: Iterable[Evaluation],
    problems: Sequence[Problem],
    candidates: Sequence[Candidate],
    config: EvalConfig,
    devices: Sequence[str],
) -> list[Evaluation]:
    """The evaluations of ``candidates`` under ``config`` on ``devices``' hardware, in candidate order,
    from a table that may hold older protocols, older candidates and duplicates (the last row wins)."""
    sha = {p.problem_id: p.sha256 for p in problems}
    names = device_names(devices)
    latest: dict[tuple[str, str], Evaluation] = {}
    for e in rows:
        if e.config_hash == config.hash and e.device_name in names:
            latest[(e.problem_sha256, e.candidate_sha256)] = e
    out = []
    for c in candidates:
        found = latest.get((sha[c.problem_id], c.sha256))
        if found is not None:
            # The stored row may come from an identical source proposed under another origin or id.
            out.append(found if found.candidate_id == c.candidate_id else _rekey(found, c))
    return out


def _rekey(e: Evaluation, c: Candidate) -> Evaluation:
    from dataclasses import replace

    return replace(e, problem_id=c.problem_id, candidate_id=c.candidate_id)


def dedupe(candidates: Iterable[Candidate]) -> list[Candidate]:
    """One candidate per (problem, source): a teacher that repeats itself is measured once."""
    seen, out = set(), []
    for c in candidates:
        if (c.problem_id, c.sha256) not in seen:
            seen.add((c.problem_id, c.sha256))
            out.append(c)
    return out


def corpus_rows(
    problems: Sequence[Problem],
    candidates: Sequence[Candidate],
    evaluations: Sequence[Evaluation],
    exclude_origins: Sequence[str] = (),
) -> list[dict]:
    """The training corpus: every executable and correct candidate with its measured speedup, its origin,
    its author's analysis ('' where there is none) and its problem's reference, so the learning stages need
    no join."""
    by_problem = {p.problem_id: p for p in problems}
    by_candidate = {c.candidate_id: c for c in candidates}
    rows = []
    for e in evaluations:
        c = by_candidate.get(e.candidate_id)
        if not e.ok or c is None or c.origin in exclude_origins:
            continue
        p = by_problem[e.problem_id]
        rows.append({
            "problem_id": p.problem_id, "level": p.level, "reference": p.source, "candidate_id": c.candidate_id,
            "origin": c.origin, "source": c.source, "speedup": e.speedup, "reference_ms": e.reference_ms,
            "candidate_ms": e.candidate_ms, "device_name": e.device_name, "config_hash": e.config_hash,
            "analysis": c.analysis,
        })
    return rows
