"""CUDA-L1's reproduction tables: every row's speedup against eager PyTorch and against the baselines the
paper reports (``torch.compile`` default and reduce-overhead, CUDA graphs), under CUDA-L1's 1e-2
tolerance and under the strict one, and the paper's aggregates per column. Pure: no Prefect, MLflow or
polars; the cross_gpu flow and benchmarks/release_report.py hand it evaluations.

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

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from cudal1.candidates import Candidate, Evaluation
from cudal1.evaluator.config import EDGE, STRICT_FLOAT32
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


def explain_gap(a: dict[str, Any], b: dict[str, Any], kind_a: str, kind_b: str) -> str:
    """Why one row's speedup (vs eager) moved between two GPUs, from what the two rows recorded.

    >>> a = {"status": "ok", "vs_eager": 2.0, "vs_eager_low": 1.9, "vs_eager_high": 2.1, "reference_ms": 1.0,
    ...      "candidate_ms": 0.5, "flags": ""}
    >>> b = dict(a, vs_eager=1.4, vs_eager_low=1.35, vs_eager_high=1.45, reference_ms=0.7)
    >>> explain_gap(a, b, "H100", "H200")[:60]
    'the reference runs 1.43x faster on H200, the program 1.00x; '

    A gain beyond the two kinds' memory bandwidth ratio is not the memory's: a reference of a few small
    launches runs at the pace of the host that launches it, and the row's own spread on one machine says so.

    >>> b = dict(b, reference_ms=0.05, vs_eager=1.0, reference_ms_min=0.05, reference_ms_max=0.08, reference_timings=4)
    >>> print(explain_gap(dict(a, reference_ms=0.1), b, "H100", "H200").split("; ", 1)[1])
    the reference gains more than H200's memory (4.8 vs 3.35 TB/s) can give (1.43x): the rest is the host's, which paces the launches of its 0.1 ms on H100 (the kinds ran on different machines), or noise; the reference alone ranged 0.05-0.08 ms over the row's 4 evaluations on H200

    Slower on H200, which is H100's chip with faster memory, is not the GPU's doing:

    >>> slow = dict(a, reference_ms=1.25, vs_eager=2.5, vs_eager_low=2.4, vs_eager_high=2.6)
    >>> print(explain_gap(a, slow, "H100", "H200"))
    the reference runs 1.25x slower on H200, the program 1.00x; the reference slower on H200, whose chip is H100's with faster memory: not the GPU's doing; the host's pace (the kinds ran on different machines), or noise
    """
    if a["status"] != b["status"]:
        def side(row: dict[str, Any], kind: str) -> str:
            return f"{row['status']} on {kind}" + (f" ({row['reason'][:100]})" if row["reason"] else "")

        passed, kind = (a, kind_a) if a["status"] == "ok" else (b, kind_b)
        share = _share_of_failed_check(passed, (b if passed is a else a)["reason"])
        edge = (f"; the pass on {kind} used {share:.2f} of the allowance the other failed: a verdict at the edge "
                "of the tolerance, decided by the inputs drawn") if share is not None and share > EDGE else ""
        return f"verdict differs: {side(a, kind_a)}, {side(b, kind_b)}{edge}"
    built_a, built_b = "extension_build_failed" not in a["flags"], "extension_build_failed" not in b["flags"]
    if built_a != built_b:
        return (f"a build that differs: its extension built on {kind_a if built_a else kind_b} only; the other GPU "
                "ran the program's PyTorch fallback")
    notes = []
    ref = (a["reference_ms"] or 0.0) / max(b["reference_ms"] or 0.0, 1e-12)
    cand = (a["candidate_ms"] or 0.0) / max(b["candidate_ms"] or 0.0, 1e-12)
    if ref and cand:
        notes.append(f"the reference runs {_pace(ref, 'faster')} on {kind_b}, the program {_pace(cand)}")
        memory, ratio = _bandwidths(kind_a, kind_b)
        if frozenset((kind_a, kind_b)) in SAME_CHIP:
            slower = [who for who, gain in (("reference", ref), ("program", cand)) if gain < 1 / 1.15]
            if slower:  # nothing in the GPU makes it slower: the second kind is the first with faster memory
                notes.append(f"the {' and the '.join(slower)} slower on {kind_b}, whose chip is {kind_a}'s with "
                             "faster memory: not the GPU's doing; the host's pace (the kinds ran on different "
                             "machines), or noise")
        for who, gain, other, ms in (("reference", ref, cand, a["reference_ms"]), ("program", cand, ref, a["candidate_ms"])):
            if not (gain > 1.15 and gain > other * 1.15):
                continue
            if ratio is not None and gain > ratio * 1.1:  # beyond what the faster memory can give
                notes.append(f"the {who} gains more than {kind_b}'s memory{memory} can give ({ratio:.2f}x): the "
                             f"rest is the host's, which paces the launches of its {ms:.3g} ms on {kind_a} (the "
                             "kinds ran on different machines), or noise")
            elif who == "reference":
                notes.append(f"the reference gains more from {kind_b}'s memory{memory}: a memory-bound reference, "
                             "the program's time set by something else")
            else:
                notes.append(f"the program gains more from {kind_b}'s memory{memory} than the reference: a "
                             "memory-bound program beside a reference bound by compute or launches")
    for row, kind in ((a, kind_a), (b, kind_b)):
        low, high = row.get("reference_ms_min"), row.get("reference_ms_max")
        if low and high and high > low * 1.15:
            notes.append(f"the reference alone ranged {low:.3g}-{high:.3g} ms over the row's "
                         f"{row['reference_timings']} evaluations on {kind}")
    overlap = (a["vs_eager_low"] or 0.0) <= (b["vs_eager_high"] or 0.0) and (b["vs_eager_low"] or 0.0) <= (a["vs_eager_high"] or 0.0)
    if overlap:
        notes.append(f"noise: the 95% intervals [{a['vs_eager_low']:.2f}, {a['vs_eager_high']:.2f}] and "
                     f"[{b['vs_eager_low']:.2f}, {b['vs_eager_high']:.2f}] overlap")
    if "noisy" in a["flags"] or "noisy" in b["flags"]:
        notes.append("flagged noisy on " + " and ".join(k for k, r in ((kind_a, a), (kind_b, b)) if "noisy" in r["flags"]))
    return "; ".join(notes) or "unexplained by what was recorded"


def _share_of_failed_check(passed: dict[str, Any], reason: str) -> float | None:
    """The share of the check the other side failed (its reason names it) that the pass used.

    >>> _share_of_failed_check({"max_rel_l2_error": 0.0095}, "output 0: relative L2 error 0.0101 exceeds 0.01 (...)")
    0.95
    >>> _share_of_failed_check({"max_scaled_error": 0.0077}, "3 of 262144 elements outside atol=0.01 rtol=0.01 (...)")
    0.77
    """
    l2 = re.search(r"relative L2 error \S+ exceeds ([0-9.e-]+)", reason)
    if l2 and passed.get("max_rel_l2_error") is not None:
        return round(passed["max_rel_l2_error"] / float(l2.group(1)), 4)
    tol = re.search(r"outside atol=([0-9.e-]+) rtol=([0-9.e-]+)", reason)
    if tol and tol.group(1) == tol.group(2) and passed.get("max_scaled_error") is not None:
        return round(passed["max_scaled_error"] / float(tol.group(1)), 4)  # |d| / (t (1 + |ref|)), atol = rtol = t
    return None


def _pace(gain: float, word: str = "") -> str:
    """A time ratio as read: 1.43 -> '1.43x faster' (or '1.43x'), 0.8 -> '1.25x slower'."""
    if gain >= 1:
        return f"{gain:.2f}x" + (f" {word}" if word else "")
    return f"{1 / gain:.2f}x slower"


# Kinds that are one chip at the same clocks, told apart by their memory alone (H200: GH100 with 141 GB
# of HBM3e): a program cannot run slower on the one with the faster memory for a reason of the GPU's own.
SAME_CHIP = {frozenset(("H100", "H200"))}

# Peak memory bandwidth, TB/s, of the GPU kinds the cross-GPU pools name (vendors' data sheets; the SXM
# parts, A100 80GB): why a memory-bound program moves between two kinds.
BANDWIDTH_TBS = {"H100": 3.35, "H200": 4.8, "H20": 4.0, "A100": 2.04, "L40": 0.864, "3090": 0.936}


def _bandwidths(kind_a: str, kind_b: str) -> tuple[str, float | None]:
    """Both kinds' bandwidths, second first, and the second's over the first's, where both are known:
    (" (4.8 vs 3.35 TB/s)", 1.43); else ("", None)."""
    a, b = BANDWIDTH_TBS.get(kind_a), BANDWIDTH_TBS.get(kind_b)
    return (f" ({b:g} vs {a:g} TB/s)", b / a) if a and b else ("", None)


def gaps(rows_a: Sequence[dict[str, Any]], rows_b: Sequence[dict[str, Any]], kind_a: str, kind_b: str,
         limit: float = 0.25) -> list[dict[str, Any]]:
    """The rows whose speedup vs eager differs by more than ``limit`` (relative to the smaller) between two
    GPUs, or whose verdict differs, each with a reason."""
    by_id = {r["problem_id"]: r for r in rows_b}
    out = []
    for a in rows_a:
        b = by_id.get(a["problem_id"])
        if b is None or "no_program" in (a["status"], b["status"]) or "not_run" in (a["status"], b["status"]):
            continue
        sa, sb = a["vs_eager"], b["vs_eager"]
        moved = (sa is not None and sb is not None and abs(sa - sb) / max(min(sa, sb), 1e-12) > limit)
        if moved or a["status"] != b["status"]:
            out.append({"problem_id": a["problem_id"], kind_a: sa, kind_b: sb,
                        "reason": explain_gap(a, b, kind_a, kind_b)})
    return out
