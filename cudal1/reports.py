"""Paper-format result tables (CUDA-L1 Tables 4-6): per level and overall, the mean, max, 75th, 50th
and 25th percentile of the speedup, how many problems succeeded and how many beat the threshold.

As in CUDA-L1, a problem's score is its best correct candidate; the statistics are taken over the
problems that have one (failures do not enter the mean, they lower ``success``), and ``total`` counts
every problem in the suite, including those no candidate was written for. A second table breaks the
same figures down by who wrote the candidates (``template:compile-default``, ``teacher:gpt``...).
"""

from __future__ import annotations

import csv
import json
import math
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cudal1.candidates import Candidate, Evaluation
from cudal1.problems import Problem

STAT_KEYS = ("mean", "max", "p75", "p50", "p25", "success", "above_threshold", "total")
ROUND_KEYS = ("round", "samples", "correct", "success_rate", "problems_solved", "new_correct", "pool_correct")


def percentile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's default).

    >>> percentile([1.0, 2.0, 3.0, 4.0], 50), percentile([1.0, 2.0, 3.0, 4.0], 75)
    (2.5, 3.25)
    """
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summarize(speedups: Sequence[float], total: int, threshold: float) -> dict[str, Any]:
    """One row of the table. With no success the speedup figures are None (JSON null), not 0.

    >>> summarize([1.0, 2.0, 4.0], total=5, threshold=1.01)["above_threshold"]
    2
    """
    row: dict[str, Any] = {"success": len(speedups), "total": total,
                           "above_threshold": sum(s > threshold for s in speedups)}
    if speedups:
        row |= {"mean": sum(speedups) / len(speedups), "max": max(speedups), "p75": percentile(speedups, 75),
                "p50": percentile(speedups, 50), "p25": percentile(speedups, 25)}
    else:
        row |= dict.fromkeys(("mean", "max", "p75", "p50", "p25"))
    return {k: row[k] for k in STAT_KEYS}


def best_per_problem(evaluations: Sequence[Evaluation], keep: set[str] | None = None) -> dict[str, float]:
    """problem_id -> best speedup among its correct candidates (only candidate ids in ``keep`` if given)."""
    best: dict[str, float] = {}
    for e in evaluations:
        if e.ok and e.speedup is not None and (keep is None or e.candidate_id in keep):
            best[e.problem_id] = max(best.get(e.problem_id, -math.inf), e.speedup)
    return best



def verdict(e: Evaluation) -> str:
    """An evaluation's verdict, where a harness failure (the reference's or the evaluator's) is none."""
    return "harness_failed" if e.harness_failed else e.status.value


def run_agreement(first: dict[str, Evaluation], second: dict[str, Evaluation]) -> dict[str, Any]:
    """How far two runs of the same candidates agree (both keyed alike, e.g. by problem id): ``median``,
    ``p95`` and ``max`` of |delta speedup| / speedup over the ``rows`` measured ok in both (fractions, not
    per cent), and the keys whose verdict changed (``flips``; a harness failure in either run is no verdict
    and is left out), of which ``edge_flips`` passed near their tolerance on the passing side
    (``tolerance_edge``: another draw of inputs could fail them, the program's doing, not the harness's).

    >>> from cudal1.candidates import Status
    >>> a = {"r1": Evaluation("r1", "c", Status.OK, speedup=2.0), "r2": Evaluation("r2", "c", Status.OK, speedup=1.0,
    ...                                                                            flags=("tolerance_edge",))}
    >>> b = {"r1": Evaluation("r1", "c", Status.OK, speedup=2.02), "r2": Evaluation("r2", "c", Status.REJECTED)}
    >>> got = run_agreement(a, b)
    >>> got["rows"], round(got["median"], 4), got["flips"], got["edge_flips"]
    (1, 0.01, ['r2'], ['r2'])
    >>> run_agreement({}, b)["median"] is None
    True
    """
    common = sorted(set(first) & set(second))
    pairs = [(first[k], second[k]) for k in common if first[k].ok and second[k].ok
             and first[k].speedup is not None and second[k].speedup is not None]
    gaps = sorted(abs(b.speedup - a.speedup) / a.speedup for a, b in pairs)  # type: ignore[operator]
    flips = [k for k in common if "harness_failed" not in (verdict(first[k]), verdict(second[k]))
             and first[k].status is not second[k].status]
    edge = [k for k in flips if "tolerance_edge" in (*first[k].flags, *second[k].flags)]
    if not gaps:
        return {"rows": 0, "median": None, "p95": None, "max": None, "flips": flips, "edge_flips": edge}
    # the 95th percentile as the nearest order statistic (the figures of the committed results use it)
    return {"rows": len(gaps), "median": statistics.median(gaps), "p95": gaps[round(0.95 * (len(gaps) - 1))],
            "max": gaps[-1], "flips": flips, "edge_flips": edge}

@dataclass(frozen=True)
class Report:
    overall: dict[str, Any]
    levels: dict[int, dict[str, Any]]
    origins: dict[str, dict[str, Any]]
    statuses: dict[str, int]
    per_problem: list[dict[str, Any]] = field(default_factory=list)  # plot data: one row per problem
    threshold: float = 1.01
    # The self-supervised rounds (round, samples, correct, success_rate, problems_solved, new_correct,
    # pool_correct): how each round did and how the corpus grew; empty when the stage did not run.
    rounds: list[dict[str, Any]] = field(default_factory=list)

    def metrics(self) -> dict[str, Any]:
        """What `dvc metrics show` and MLflow get: nested keys flatten to ``levels.level1.mean``..."""
        return {
            "overall": self.overall,
            "levels": {f"level{k}": v for k, v in sorted(self.levels.items())},
            "origins": self.origins,
            "statuses": self.statuses,
        } | ({"self_supervised": {f"round{int(r['round'])}": {k: r[k] for k in ROUND_KEYS[1:] if k in r}
                                  for r in self.rounds}} if self.rounds else {})


def build_report(
    problems: Sequence[Problem],
    candidates: Sequence[Candidate],
    evaluations: Sequence[Evaluation],
    threshold: float = 1.01,
    rounds: Sequence[dict[str, Any]] = (),
) -> Report:
    levels_of = {p.problem_id: p.level for p in problems}
    evaluations = [e for e in evaluations if e.problem_id in levels_of]
    best = best_per_problem(evaluations)
    overall = summarize(list(best.values()), len(problems), threshold)
    levels = {}
    for level in sorted(set(levels_of.values())):
        ids = [pid for pid, lv in levels_of.items() if lv == level]
        levels[level] = summarize([best[pid] for pid in ids if pid in best], len(ids), threshold)
    origin_of = {c.candidate_id: c.origin for c in candidates}
    origins = {}
    for origin in sorted({origin_of.get(e.candidate_id, "unknown") for e in evaluations}):
        keep = {cid for cid, o in origin_of.items() if o == origin}
        scored = best_per_problem(evaluations, keep)
        origins[origin] = summarize(list(scored.values()), len(problems), threshold)
    statuses = dict(sorted(Counter(e.status.value for e in evaluations).items()))
    per_problem = []
    for p in problems:
        tried = [e for e in evaluations if e.problem_id == p.problem_id]
        winner = max((e for e in tried if e.ok and e.speedup is not None), key=lambda e: e.speedup or 0.0, default=None)
        per_problem.append({
            "problem_id": p.problem_id, "level": p.level, "name": p.name,
            "speedup": winner.speedup if winner else None,
            "origin": origin_of.get(winner.candidate_id, "unknown") if winner else "",
            "candidates": len(tried), "correct": sum(e.ok for e in tried),
        })
    return Report(overall, levels, origins, statuses, per_problem, threshold, [dict(r) for r in rounds])


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def _table(first: str, rows: dict[str, dict[str, Any]], threshold: float) -> list[str]:
    head = [first, "Mean", "Max", "75%", "50%", "25%", "Success", f"Speedup>{threshold:g}"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, r in rows.items():
        cells = [name, *(_fmt(r[k]) for k in ("mean", "max", "p75", "p50", "p25")),
                 f"{r['success']}/{r['total']}", f"{r['above_threshold']}/{r['total']}"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def render_markdown(report: Report, title: str) -> str:
    """The report as markdown: the paper's table, then the per-origin breakdown and per-problem rows."""
    t = report.threshold
    lines = [f"# {title}", "", "Speedup = reference time / candidate time; a problem's score is its best "
             "correct candidate. Statistics over successful problems.", "", "## By level", ""]
    rows = {f"Level {k}": v for k, v in report.levels.items()} | {"**All**": report.overall}
    lines += _table("Level", rows, t)
    lines += ["", "## By origin", ""] + _table("Origin", report.origins, t)
    lines += ["", "## Evaluations by status", ""]
    lines += [f"- {status}: {n}" for status, n in report.statuses.items()] or ["- none"]
    lines += ["", "## Problems", "", "| Problem | Level | Best speedup | By | Correct/Tried |", "|---|---|---|---|---|"]
    for r in report.per_problem:
        lines.append(f"| {r['problem_id']} {r['name']} | {r['level']} | {_fmt(r['speedup'])} | {r['origin'] or '-'} "
                     f"| {r['correct']}/{r['candidates']} |")
    return "\n".join(lines + _rounds(report.rounds)) + "\n"


def _rounds(rounds: Sequence[dict[str, Any]]) -> list[str]:
    """The self-supervised rounds: each round's success and what it added to the corpus."""
    if not rounds:
        return []
    lines = ["", "## Self-supervised rounds", "", "Samples of the policy, evaluated; the correct ones are its next "
             "fine-tuning data and join the pool the prompts' exemplars come from.", "",
             "| Round | Correct/Samples | Success rate | Problems solved | New correct programs | Correct programs in the pool |",
             "|---|---|---|---|---|---|"]
    for r in rounds:
        lines.append(f"| {r['round']} | {r['correct']}/{r['samples']} | {_fmt(r['success_rate'])} | "
                     f"{r['problems_solved']} | {r.get('new_correct', '-')} | {r.get('pool_correct', '-')} |")
    return lines


def write_report(report: Report, out_dir: str | Path, title: str) -> dict[str, Path]:
    """report.md, metrics.json, plot data (CSV for `dvc plots`) and two PNGs; returns the paths by role."""
    out = Path(out_dir)
    (out / "plots").mkdir(parents=True, exist_ok=True)
    paths = {
        "markdown": out / "report.md", "metrics": out / "metrics.json",
        "speedups_csv": out / "plots" / "speedups.csv", "levels_csv": out / "plots" / "levels.csv",
        "histogram_png": out / "plots" / "speedup_hist.png", "levels_png": out / "plots" / "speedup_by_level.png",
    }
    paths["markdown"].write_text(render_markdown(report, title))
    paths["metrics"].write_text(json.dumps(report.metrics(), indent=2, sort_keys=True) + "\n")
    with paths["speedups_csv"].open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["problem_id", "level", "name", "speedup", "origin", "candidates", "correct"])
        writer.writeheader()
        writer.writerows(report.per_problem)
    with paths["levels_csv"].open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["level", *STAT_KEYS])
        writer.writeheader()
        for level, row in [(f"level{k}", v) for k, v in report.levels.items()] + [("all", report.overall)]:
            writer.writerow({"level": level, **row})
    plot_histogram(report, paths["histogram_png"])
    plot_levels(report, paths["levels_png"])
    return paths


def plot_histogram(report: Report, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on servers and CI
    import matplotlib.pyplot as plt

    values = [r["speedup"] for r in report.per_problem if r["speedup"] is not None]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    if values:
        lo, hi = min(values), max(values)
        # Speedups span orders of magnitude on real suites: log-spaced bins keep 1x readable.
        if hi / max(lo, 1e-9) > 10:
            edges = [lo * (hi / lo) ** (i / 20) for i in range(21)]
            ax.set_xscale("log")
        else:
            edges = 20
        ax.hist(values, bins=edges, color="#4C72B0", edgecolor="white")
        ax.axvline(1.0, color="grey", linestyle="--", linewidth=1)
        ax.axvline(report.threshold, color="#C44E52", linestyle=":", linewidth=1)
    else:
        ax.text(0.5, 0.5, "no correct candidate", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("best speedup per problem (x)")
    ax.set_ylabel("problems")
    ax.set_title(f"Speedups: {len(values)}/{len(report.per_problem)} problems solved")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_levels(report: Report, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [f"L{k}" for k in report.levels] + ["all"]
    rows = [*report.levels.values(), report.overall]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    xs = range(len(names))
    width = 0.38
    ax.bar([x - width / 2 for x in xs], [r["mean"] or 0.0 for r in rows], width, label="mean", color="#4C72B0")
    ax.bar([x + width / 2 for x in xs], [r["p50"] or 0.0 for r in rows], width, label="median", color="#55A868")
    for x, r in zip(xs, rows, strict=True):
        ax.annotate(f"{r['success']}/{r['total']}", (x, max(r["mean"] or 0.0, r["p50"] or 0.0)),
                    ha="center", va="bottom", fontsize=8)
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    ax.set_xticks(list(xs), names)
    ax.set_ylabel("speedup (x)")
    ax.set_title("Speedup by level (labels: successes/total)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_series(rows: Sequence[dict[str, Any]], x: str, ys: Sequence[str], path: str | Path, title: str) -> Path:
    """One line per column in ``ys`` against ``x`` (SFT loss per step, RL reward per epoch); rows missing a
    value (or holding NaN) leave a gap instead of failing the stage."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for column in ys:
        points = [(float(r[x]), float(r[column])) for r in rows
                  if r.get(column) not in (None, "") and math.isfinite(float(r[column]))]
        if points:
            ax.plot(*zip(*points), marker="o" if len(points) < 30 else None, label=column)
    ax.set_xlabel(x)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
