"""CUDA-L1's reproduction tables: every row's speedup against eager PyTorch and against the baselines the
paper reports (``torch.compile`` default and reduce-overhead, CUDA graphs), under CUDA-L1's 1e-2
tolerance and under the strict one, and the paper's aggregates per column. Pure: no Prefect, MLflow or
polars; the cross_gpu flow hands it evaluations.

A baseline is the template teacher's rewrite of the row's reference (``template:compile-default`` ...),
evaluated against the same eager reference under the same protocol, so a program's speedup over a
baseline is ``speedup_vs_eager(program) / speedup_vs_eager(baseline)``, with the interval
``[low_p / high_b, high_p / low_b]``. A baseline that failed (a compile that does not build, a CUDA graph
on a CPU) leaves that column empty for the row; the row still counts in the others.

Only the program's run decides the strict verdict: one run under CUDA-L1's 1e-2 records
``max_scaled_error`` = max |out - ref| / (1 + |ref|), which is <= t exactly when the output passes
atol = rtol = t, so the verdict at 1e-4 follows without a second run.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from cudal1.candidates import Candidate, Evaluation
from cudal1.evaluator.config import STRICT_FLOAT32
from cudal1.gpu_gaps import explain_gap, gaps  # noqa: F401  the reproduction's rows that moved between GPUs
from cudal1.problems import Problem, ReleasedKernel
from cudal1.reports import summarize

# column -> (template variant, torch.compile mode); "eager" is the reference itself.
BASELINES: dict[str, tuple[str, str | None]] = {
    "compile-default": ("compile", "default"),
    "compile-reduce-overhead": ("compile", "reduce-overhead"),
    "cuda_graph": ("cuda_graph", None),
}
COLUMNS = ("eager", *BASELINES)
# The release's own score for each column (read from ../shared when a page is made, never stored here).
REPORTED = {"eager": "score_default", "compile-default": "score_torch_compile_default",
            "compile-reduce-overhead": "score_torch_compile_reduce_overhead", "cuda_graph": "score_cuda_graph"}
COLUMN_TITLES = {"eager": "vs eager PyTorch", "compile-default": "vs torch.compile (default)",
                 "compile-reduce-overhead": "vs torch.compile (reduce-overhead)", "cuda_graph": "vs CUDA graphs"}
TOLERANCES = ("1e-2", "strict")


def baseline_origin(column: str) -> str:
    return f"template:{column}"


def is_baseline(origin: str) -> bool:
    return origin in {baseline_origin(c) for c in BASELINES}


def baseline_candidates(problems: Iterable[Problem], columns: Sequence[str]) -> list[Candidate]:
    """The template rewrite of each problem's reference for every baseline column asked for."""
    from cudal1.generation.templates import template_source

    unknown = [c for c in columns if c not in BASELINES]
    if unknown:
        raise ValueError(f"unknown baseline {unknown[0]!r}; choose from {', '.join(BASELINES)}")
    out = []
    for p in problems:
        for column in columns:
            variant, mode = BASELINES[column]
            out.append(Candidate(p.problem_id, template_source(p, variant, mode), origin=baseline_origin(column)))
    return out


def release_inputs(rows: Sequence[ReleasedKernel], baselines: Sequence[str] = ()) -> tuple[list[Problem], list[Candidate]]:
    """Every row's problem (a row without a program stays in, so tables have every row), the released
    program of each row that has one (origin ``cudal1-<gpu>``), and the baselines of those rows."""
    problems = [r.problem for r in rows]
    programs = [Candidate(r.problem.problem_id, r.candidate_source, origin=f"cudal1-{r.gpu}")
                for r in rows if r.candidate_source]
    with_code = [r.problem for r in rows if r.candidate_source]
    return problems, programs + baseline_candidates(with_code, baselines)


def strict_verdict(e: Evaluation, strict: float = STRICT_FLOAT32) -> str:
    """The verdict under atol = rtol = ``strict``, derived from a lenient run's recorded errors.

    >>> from cudal1.candidates import Status
    >>> ok = Evaluation("p", "c", Status.OK, max_rel_l2_error=1e-6, extra={"max_scaled_error": 3e-3})
    >>> strict_verdict(ok)  # passed 1e-2, but an element is 3e-3 (1 + |ref|) off
    'incorrect'
    >>> strict_verdict(Evaluation("p", "c", Status.OK, max_rel_l2_error=1e-7, extra={"max_scaled_error": 5e-5}))
    'ok'
    >>> strict_verdict(Evaluation("p", "c", Status.OK, max_rel_l2_error=1e-7, extra={"max_scaled_error": 5e-5},
    ...                           flags=("precision_lowered",)))  # TF32 or bfloat16 matmuls in a float32 problem
    'rejected'
    """
    if not e.ok:
        return e.status.value
    if "precision_lowered" in e.flags:  # the evaluator rejects it under the strict tolerance (checks.check_precision)
        return "rejected"
    scaled = e.extra.get("max_scaled_error")
    if scaled is None:
        return "unknown"
    return "ok" if scaled <= strict and (e.max_rel_l2_error or 0.0) <= strict else "incorrect"


@dataclass(frozen=True)
class Versus:
    speedup: float
    low: float
    high: float


def versus(program: Evaluation | None, baseline: Evaluation | None) -> Versus | None:
    """The program's speedup over a baseline, both measured against the same eager reference.

    >>> from cudal1.candidates import Status
    >>> p = Evaluation("p", "a", Status.OK, speedup=4.0, speedup_low=3.8, speedup_high=4.2)
    >>> b = Evaluation("p", "b", Status.OK, speedup=2.0, speedup_low=1.9, speedup_high=2.1)
    >>> v = versus(p, b); round(v.speedup, 3), round(v.low, 3), round(v.high, 3)
    (2.0, 1.81, 2.211)
    """
    p, b = _measured(program), _measured(baseline)
    if p is None or b is None:
        return None
    return Versus(p.speedup / b.speedup, p.low / b.high, p.high / max(b.low, 1e-12))


def _measured(e: Evaluation | None) -> Versus | None:
    """An ok evaluation's speedup over eager with its interval (the figure itself where none was recorded)."""
    if e is None or not e.ok or not e.speedup:
        return None
    return Versus(e.speedup, e.speedup_low or e.speedup, e.speedup_high or e.speedup)


def _status(e: Evaluation | None, has_program: bool) -> str:
    if not has_program:
        return "no_program"
    if e is None:
        return "not_run"
    return "harness_failed" if e.harness_failed else e.status.value


def row_table(problems: Sequence[Problem], candidates: Sequence[Candidate],
              evaluations: Sequence[Evaluation]) -> list[dict[str, Any]]:
    """One row per problem, in the problems' order: its status under both tolerances and its speedup
    (with interval) in every column. Programs are the candidates that are not baselines; a problem with
    several takes its best correct one, as CUDA-L1 scores a problem."""
    origin = {c.candidate_id: c.origin for c in candidates}
    programs_of: dict[str, list[str]] = {}
    for c in candidates:
        if not is_baseline(c.origin):
            programs_of.setdefault(c.problem_id, []).append(c.candidate_id)
    by_problem: dict[str, list[Evaluation]] = {}
    for e in evaluations:
        by_problem.setdefault(e.problem_id, []).append(e)
    rows = []
    for p in problems:
        found = by_problem.get(p.problem_id, [])
        mine = [e for e in found if e.candidate_id in programs_of.get(p.problem_id, [])]
        ok = [e for e in mine if e.ok and e.speedup is not None]
        program = max(ok, key=lambda e: e.speedup or 0.0) if ok else (mine[-1] if mine else None)
        bases = {origin.get(e.candidate_id, ""): e for e in found if is_baseline(origin.get(e.candidate_id, ""))}
        row: dict[str, Any] = {
            "problem_id": p.problem_id, "level": p.level,
            "status": _status(program, p.problem_id in programs_of),
            "strict_status": strict_verdict(program) if program is not None else "",
            "reference_ms": program.reference_ms if program else None,
            # The reference is timed again with every evaluation of the row (program and baselines): how far
            # its own time moves on one machine is the row's noise floor (explain_gap).
            **_reference_range(found),
            "candidate_ms": program.candidate_ms if program else None,
            "device": program.device_name if program else "",
            "flags": ",".join(program.flags) if program else "",
            "reason": (program.reason if program else "")[:200],
            # how close a pass came to its tolerance, in the two checks' own terms (explain_gap)
            "max_scaled_error": program.extra.get("max_scaled_error") if program and program.ok else None,
            "max_rel_l2_error": program.max_rel_l2_error if program and program.ok else None,
        }
        for column in COLUMNS:
            base = bases.get(baseline_origin(column))
            v = _measured(program) if column == "eager" else versus(program, base)
            name = field_name(column)
            row[f"vs_{name}"] = v.speedup if v else None
            row[f"vs_{name}_low"] = v.low if v else None
            row[f"vs_{name}_high"] = v.high if v else None
            if column != "eager":
                row[f"{name}_status"] = base.status.value if base is not None else ""
                row[f"{name}_ms"] = base.candidate_ms if base is not None and base.ok else None
        rows.append(row)
    return rows


def _reference_range(found: Sequence[Evaluation]) -> dict[str, Any]:
    times = [e.reference_ms for e in found if e.reference_ms]
    return {"reference_ms_min": min(times) if times else None, "reference_ms_max": max(times) if times else None,
            "reference_timings": len(times)}


def counts(row: dict[str, Any], column: str, tolerance: str) -> bool:
    """Whether a row is a success in a column: correct under the tolerance and measured in the column."""
    correct = row["status"] == "ok" and (tolerance == "1e-2" or row["strict_status"] == "ok")
    return correct and row[f"vs_{field_name(column)}"] is not None


def field_name(column: str) -> str:
    """A column's name in the per-row table: ``compile-default`` -> ``compile_default`` (an identifier in
    every tool that reads the CSV)."""
    return column.replace("-", "_")


def aggregates(rows: Sequence[dict[str, Any]], threshold: float = 1.01) -> list[dict[str, Any]]:
    """The paper's statistics (mean, max, p75, p50, p25, successes) per column and tolerance, over the
    rows that succeed there, out of all rows."""
    out = []
    for column in COLUMNS:
        for tolerance in TOLERANCES:
            values = [r[f"vs_{field_name(column)}"] for r in rows if counts(r, column, tolerance)]
            out.append({"column": column, "tolerance": tolerance, **summarize(values, len(rows), threshold)})
    return out


def reported_aggregates(release: Sequence[ReleasedKernel], threshold: float = 1.01) -> list[dict[str, Any]]:
    """The same statistics over the release's reported scores (rows with a program and a score)."""
    out = []
    for column in COLUMNS:
        values = [r.reported[REPORTED[column]] for r in release
                  if r.candidate_source and r.reported.get(REPORTED[column]) is not None]
        out.append({"column": column, "tolerance": "reported", **summarize(values, len(release), threshold)})
    return out


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def aggregate_table(sets: Sequence[tuple[str, Sequence[dict[str, Any]]]], threshold: float,
                    columns: Sequence[str] = COLUMNS) -> list[str]:
    """Markdown lines: one table per column, a line per (label, tolerance), the paper's layout."""
    lines = []
    for column in columns:
        lines += ["", f"**{COLUMN_TITLES[column]}**", "",
                  f"| set | tolerance | Mean | Max | 75% | 50% | 25% | Success | Speedup>{threshold:g} |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for label, stats in sets:
            for s in stats:
                if s["column"] != column:
                    continue
                cells = [label, s["tolerance"], *(_fmt(s[k]) for k in ("mean", "max", "p75", "p50", "p25")),
                         f"{s['success']}/{s['total']}", f"{s['above_threshold']}/{s['total']}"]
                lines.append("| " + " | ".join(cells) + " |")
    return lines
