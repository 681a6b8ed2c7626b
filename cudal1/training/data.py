"""Training data: the augment corpus as pool entries, and prompt -> completion examples built from it.

An SFT example pairs a contrastive prompt (reference + exemplars drawn from the corpus programs of the same
problem) with a response in the protocol's format whose program is one corpus program. The Performance
Analysis is the program's author's where it wrote one (a teacher's answer, a file's column); else it is
written from facts we have (what the program changes, its measured speedup, the fastest exemplar shown):
inventing reasoning would teach the policy to invent too.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cudal1.candidates import Candidate, Status
from cudal1.pool import CandidatePool, PoolEntry
from cudal1.problems import Problem, sha256_text
from cudal1.prompts import Exemplar, build_prompt, prompt_text, render_response
from cudal1.training.analysis import analysis_text, describe_change, written_analyses
from cudal1.training.settings import PromptSettings


def load_corpus(path: str | Path, stage: str = "corpus") -> list[PoolEntry]:
    """Correct corpus programs from a parquet table with ``problem_id``, ``source``, ``speedup`` (and
    optionally ``origin``, ``status``, ``candidate_id``). Rows whose status is not ``ok`` or whose speedup
    is missing are skipped: the corpus is executable and correct programs only."""
    import polars as pl

    path = Path(path)
    files = sorted(path.glob("*.parquet")) if path.is_dir() else [path]
    if not files or not all(f.exists() for f in files):
        raise FileNotFoundError(f"{path}: no corpus parquet; run the augment stage first (dvc repro augment)")
    out = []
    for file in files:
        df = pl.read_parquet(file)
        missing = {"problem_id", "source", "speedup"} - set(df.columns)
        if missing:
            raise ValueError(f"{file}: corpus table lacks {sorted(missing)}; expected problem_id, source, speedup")
        for row in df.iter_rows(named=True):
            if row.get("status", "ok") != Status.OK.value or row["speedup"] is None:
                continue
            c = Candidate(row["problem_id"], row["source"], row.get("origin") or "corpus", row.get("candidate_id") or "")
            out.append(PoolEntry(c.problem_id, c.candidate_id, c.sha256, c.source, c.origin, Status.OK.value,
                                 float(row["speedup"]), "", stage, analysis=row.get("analysis") or ""))
    return out


def tokenizer_texts(problems: Sequence[Problem], corpus: Sequence[PoolEntry], max_exemplars: int = 2) -> list[str]:
    """What the tiny policy's tokenizer learns from: the references, the corpus programs, the prompt files
    and every SFT analysis/design text, each fixed text once per problem (every prompt and response
    repeats them, so their lines deserve tokens of their own)."""
    fixed = [prompt_text(name) for name in ("contrastive", "exemplar", "no_exemplars", "response")]
    fixed += sorted({design_text(e.origin) for e in corpus})
    by_problem = {p.problem_id: p for p in problems}
    written = [line for pid in sorted({e.problem_id for e in corpus} & set(by_problem))
               for line in written_analyses(by_problem[pid].source, [(e.source, e.origin, e.speedup)
                                                                     for e in corpus if e.problem_id == pid])]
    return [p.source for p in problems] + [e.source for e in corpus] + (fixed + written) * max(1, len(problems))


def fastest(exemplars: Sequence[Exemplar]) -> int:
    """1-based index of the fastest exemplar, 0 when there are none."""
    return 1 + max(range(len(exemplars)), key=lambda i: exemplars[i].speedup) if exemplars else 0


def design_text(origin: str) -> str:
    return f"Approach: {origin}."


def target_analysis(entry: PoolEntry, reference: str, exemplars: Sequence[Exemplar], pool: CandidatePool) -> str:
    """The Performance Analysis of an SFT target: its author's where it wrote one, else one written from the
    measured facts (cudal1.training.analysis): what the program changes, its speedup, why it is faster,
    and which shown implementation measured fastest."""
    if entry.analysis.strip():
        return entry.analysis
    best = None
    if exemplars:
        number = fastest(exemplars)
        shown = exemplars[number - 1]
        known = pool.get(entry.problem_id, sha256_text(shown.source))
        best = (number, shown.speedup, describe_change(reference, shown.source, known.origin if known else ""))
    return analysis_text(describe_change(reference, entry.source, entry.origin), entry.speedup, best)


def response_for(entry: PoolEntry, reference: str, exemplars: Sequence[Exemplar], pool: CandidatePool) -> str:
    return render_response(target_analysis(entry, reference, exemplars, pool), design_text(entry.origin), entry.source)


def contrastive_prompt(problem: Problem, pool: CandidatePool, rng: random.Random,
                       settings: PromptSettings) -> tuple[str, list[Exemplar]]:
    """A prompt for ``problem`` with exemplars drawn from ``pool`` (every stage draws them this way)."""
    exemplars = pool.sample_exemplars(problem.problem_id, rng, settings.exemplars, settings.bucket_width,
                                      settings.temperature) if settings.exemplars else []
    return build_prompt(problem.source, exemplars), exemplars


def sft_examples(problems: Mapping[str, Problem], corpus: Sequence[PoolEntry], settings: PromptSettings,
                 seed: int = 0, copies: int = 1) -> list[dict[str, Any]]:
    """One prompt/completion example per corpus program (``copies`` times, each with freshly drawn
    exemplars). Programs of problems not in ``problems`` are skipped.

    Exemplars are drawn from the whole corpus pool, the target included, exactly as the later stages
    draw them: leaving the target out changes how many exemplars a prompt shows (a problem with two
    corpus programs would only ever show one), and the policy then meets prompts at RL time that it
    never saw in SFT. Measured: greedy decoding solved 2 of 15 problems that way."""
    rng = random.Random(seed)
    pool = CandidatePool(corpus)
    rows = []
    for _ in range(copies):
        for entry in sorted(corpus, key=lambda e: (e.problem_id, e.sha256)):
            problem = problems.get(entry.problem_id)
            if problem is None:
                continue
            prompt, exemplars = contrastive_prompt(problem, pool, rng, settings)
            completion = response_for(entry, problem.source, exemplars, pool)
            rows.append({"prompt": prompt, "completion": completion, "problem_id": entry.problem_id})
    return rows


def fit_length(rows: Sequence[dict[str, Any]], tokenizer: Any, max_length: int) -> tuple[list[dict[str, Any]], int]:
    """Drop examples whose prompt + completion exceed ``max_length`` tokens (truncation would cut the
    program, teaching the policy half programs). Returns the kept rows and how many were dropped."""
    kept = [r for r in rows if len(tokenizer(r["prompt"] + r["completion"], add_special_tokens=False)["input_ids"])
            < max_length]
    return kept, len(rows) - len(kept)
