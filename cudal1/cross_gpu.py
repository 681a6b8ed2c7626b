"""The cross-GPU table (CUDA-L1 Table 7 style): one candidate set measured on several GPU kinds, one row
per kind with the mean, max, 75th/50th/25th percentile of the best speedup per problem and the count of
problems with a correct candidate. Pure: no Prefect, no MLflow; the flow in ``flows/cross_gpu.py``
collects the :class:`PoolResult` records and hands them here.

Storage layout (a folder every worker host can read and write)::

    <storage>/<key>/inputs/{problems,candidates}.parquet     written once by the cross_gpu flow
    <storage>/<key>/<pool>/params.yaml                       the evaluate section that pool runs
    <storage>/<key>/<pool>/evaluations.parquet               the evaluate flow's output
    <storage>/<key>/<pool>/measurements-<evaluator>.parquet  appended after every evaluation (resume)

``<key>`` hashes the problems, candidates and protocol, so re-running the same set resumes where each
pool stopped, and another set never mixes with it. Paths inside ``params.yaml`` are relative to it, so a
host that mounts the storage elsewhere reads the same files.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cudal1.candidates import Candidate, Evaluation
from cudal1.cross_gpu_pool import on_kind, protocol_section
from cudal1.evaluator.config import EvalConfig
from cudal1.problems import Problem
from cudal1.reports import STAT_KEYS, best_per_problem, summarize
from cudal1.reproduction import (
    COLUMNS,
    aggregate_table,
    aggregates,
    baseline_origin,
    gaps,
    is_baseline,
    row_table,
)

# What happened to one pool's run. Only "completed" rows are complete; the others show what landed
# ("partial" and "not_run": gathered from the storage without a flow run, e.g. after --local --pool runs).
POOL_STATUSES = ("completed", "partial", "not_run", "timed_out", "failed", "no_deployment")


def storage_key(problems: Sequence[Problem], candidates: Sequence[Candidate], config: EvalConfig) -> str:
    digest = hashlib.sha256()
    for p in sorted(problems, key=lambda p: p.problem_id):
        digest.update(f"{p.problem_id}\0{p.sha256}\n".encode())
    for c in sorted(candidates, key=lambda c: (c.problem_id, c.candidate_id)):
        digest.update(f"{c.problem_id}\0{c.candidate_id}\0{c.sha256}\n".encode())
    digest.update(config.hash.encode())
    return digest.hexdigest()[:12]


def pool_evaluate_section(devices: Sequence[str], config: EvalConfig) -> dict[str, Any]:
    """The ``evaluate`` section a pool's flow run reads; paths relative to ``<key>/<pool>/params.yaml``."""
    protocol = protocol_section(config)
    return {
        "problems": "../inputs/problems.parquet",
        "candidates": "../inputs/candidates.parquet",
        "reuse": [],
        "out": "evaluations.parquet",
        "devices": list(devices),
        "protocol": protocol,
        "measurements_cache": "measurements.parquet",
    }


def _measurement_files(pool_dir: Path) -> list[Path]:
    found = [*pool_dir.glob("measurements*.parquet"), *pool_dir.glob("measurements*.jsonl")]
    return sorted(q for q in found if ".partial" not in q.name)


def partial_evaluations(pool_dir: Path, config: EvalConfig, candidates: Sequence[Candidate],
                        gpu_kind: str = "", config_hash: str | None = None) -> list[Evaluation]:
    """What a pool measured so far, from its incremental measurements file(s): used when its run did
    not complete (worker killed, cancelled after a timeout), so finished evaluations still count. With
    ``gpu_kind``, only those measured on that kind of GPU. The harness's failures are no verdict on their
    candidates (the pool measures them again): left out, as not yet measured. Only measurements made
    under ``config`` count, or under ``config_hash`` where given (kept ones of an earlier protocol)."""
    from cudal1.candidates import load_evaluations

    by_sha: dict[tuple[str, str], Candidate] = {(c.problem_id, c.sha256): c for c in candidates}
    found: dict[str, Evaluation] = {}
    wanted = config_hash or config.hash
    for path in _measurement_files(pool_dir):
        for e in load_evaluations(path):
            c = by_sha.get((e.problem_id, e.candidate_sha256))
            if (e.config_hash == wanted and c is not None and not e.harness_failed
                    and (not gpu_kind or on_kind(gpu_kind, e))):
                found[c.candidate_id] = e
    return list(found.values())


def protocols_measured(pool_dir: Path, candidates: Sequence[Candidate], gpu_kind: str = "") -> dict[str, int]:
    """Config hash -> how many of ``candidates`` a pool's measurements cover under it (on ``gpu_kind``, the
    harness's failures left out, as :func:`partial_evaluations` counts them), in order of first measurement."""
    from cudal1.candidates import load_evaluations

    by_sha = {(c.problem_id, c.sha256): c.candidate_id for c in candidates}
    covered: dict[str, set[str]] = {}
    for path in _measurement_files(pool_dir):
        for e in load_evaluations(path):
            found = by_sha.get((e.problem_id, e.candidate_sha256))
            if found is not None and not e.harness_failed and (not gpu_kind or on_kind(gpu_kind, e)):
                covered.setdefault(e.config_hash, set()).add(found)
    return {h: len(ids) for h, ids in covered.items()}


def completed_evaluations(pool_dir: Path) -> list[Evaluation] | None:
    """A pool's completed result: the evaluate flow's table (a Prefect worker) or the pool runner's
    (``cudal1.cross_gpu_pool``); None when neither is there yet."""
    from cudal1.candidates import load_evaluations

    for name in ("evaluations.parquet", "evaluations.jsonl"):
        if (pool_dir / name).is_file():
            return load_evaluations(pool_dir / name)
    return None


def measured_hashes(folder: Path, pools: Sequence[str]) -> set[str]:
    """The protocols (config hashes) the pools under ``folder`` measured with."""
    from cudal1.candidates import load_evaluations

    return {e.config_hash for name in pools for path in _measurement_files(folder / name)
            for e in load_evaluations(path)}


def gather_pool(pool_dir: Path, pool: str, gpu_kind: str, config: EvalConfig, candidates: Sequence[Candidate],
                status: str = "", message: str = "", config_hash: str | None = None) -> PoolResult:
    """One pool's result from the storage. With no ``status`` (gathering without a flow run) it is
    ``completed`` when the pool's table is there or every candidate has a finished evaluation, ``partial``
    when only some do, else ``not_run``; a given status other than ``completed`` keeps the finished
    evaluations it can find."""
    undecided = status in ("", "completed")  # a run that failed or timed out keeps its status
    complete = completed_evaluations(pool_dir) if undecided else None
    elsewhere = [e for e in complete or () if not on_kind(gpu_kind, e)]
    if complete is not None and not elsewhere:
        return PoolResult(pool, gpu_kind, "completed", message, tuple(complete))
    evaluations = partial_evaluations(pool_dir, config, candidates, gpu_kind, config_hash)
    if elsewhere:  # a table some of whose figures another GPU made is not this pool's result
        status, names = "partial", sorted({e.device_name for e in elsewhere})
        message = (f"{len(elsewhere)} evaluations were measured on {', '.join(names)}, not a {gpu_kind}: left out; "
                   f"run `python -m cudal1.cross_gpu_pool {os.path.relpath(pool_dir)}` on a {gpu_kind} machine "
                   f"to measure them there")
    elif undecided and evaluations and len(evaluations) == len(candidates):
        status = "completed"  # every candidate measured, the pool's table not written (e.g. kept measurements)
    elif undecided:
        status = "partial" if evaluations else "not_run"
        message = message or (f"{len(evaluations)} of {len(candidates)} candidates measured; run "
                              f"`python -m cudal1.cross_gpu_pool {os.path.relpath(pool_dir)}` on an available {gpu_kind} machine to finish")
    elif evaluations:
        message = f"{message} ({len(evaluations)} finished evaluations kept)".strip()
    return PoolResult(pool, gpu_kind, status, message, tuple(evaluations))


@dataclass(frozen=True)
class PoolResult:
    pool: str
    gpu_kind: str
    status: str  # one of POOL_STATUSES
    message: str = ""
    evaluations: tuple[Evaluation, ...] = ()
    flow_run_id: str = ""
    device_names: tuple[str, ...] = field(default=())

    @property
    def completed(self) -> bool:
        return self.status == "completed"


def table_rows(results: Sequence[PoolResult], problems: Sequence[Problem], threshold: float,
               candidates: Sequence[Candidate] = ()) -> list[dict[str, Any]]:
    """One row per pool: the paper's statistics over the problems its best candidate solved. Baseline
    candidates (``template:compile-default``...) are yardsticks, not solutions: they are left out here
    and measured against in :func:`reproduction`."""
    ids = {p.problem_id for p in problems}
    yardsticks = {c.candidate_id for c in candidates if is_baseline(c.origin)}
    rows = []
    for r in results:
        best = best_per_problem([e for e in r.evaluations if e.problem_id in ids and e.candidate_id not in yardsticks])
        stats = summarize(list(best.values()), len(problems), threshold)
        names = sorted({e.device_name for e in r.evaluations if e.device_name})
        rows.append({"gpu": r.gpu_kind, "pool": r.pool, "status": r.status, "evaluations": len(r.evaluations),
                     "device_names": ", ".join(names), **stats, "message": r.message})
    return rows


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def _file_part(text: str) -> str:
    """A GPU kind as part of a file name: letters, digits, '-' and '_' kept, anything else '_'."""
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in text) or "gpu"


def render_markdown(rows: Sequence[dict[str, Any]], title: str, threshold: float, command: str = "") -> str:
    head = ["GPU", "Device (as torch names it)", "Mean", "Max", "75%", "50%", "25%", "Success",
            f"Speedup>{threshold:g}", "Run"]
    lines = [f"# {title}", ""]
    if command:
        lines += [f"Written by the cross-GPU report; regenerate it with `{command}`.", ""]
    lines += ["Speedup = reference time / candidate time, measured on each GPU kind; a problem's score is its "
              "best correct candidate; statistics over the problems with one.", "",
              "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["gpu"], r.get("device_names") or "-", *(_fmt(r[k]) for k in ("mean", "max", "p75", "p50", "p25")),
                 f"{r['success']}/{r['total']}", f"{r['above_threshold']}/{r['total']}", r["status"]]
        lines.append("| " + " | ".join(cells) + " |")
    notes = [f"- {r['gpu']} (pool `{r['pool']}`): {r['message']}" for r in rows if r["message"]]
    if notes:
        lines += ["", "## Notes", "", *notes]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Reproduction:
    """CUDA-L1's baseline columns per GPU: every problem's row (status under both tolerances, speedup vs
    eager and vs each baseline) per pool, the paper's aggregates per pool, and the rows that moved
    between the first pool with results and each other one."""

    rows: dict[str, list[dict[str, Any]]]  # pool -> one row per problem
    stats: list[tuple[str, list[dict[str, Any]]]]  # (gpu kind, aggregates) per pool with results
    moved: list[tuple[str, str, list[dict[str, Any]]]]  # (gpu a, gpu b, rows apart by > 25%)
    columns: tuple[str, ...] = COLUMNS  # eager and the baselines the candidate set holds
    kinds: dict[str, str] = field(default_factory=dict)  # pool -> gpu kind


def reproduction(results: Sequence[PoolResult], problems: Sequence[Problem], candidates: Sequence[Candidate],
                 threshold: float) -> Reproduction:
    measured = [r for r in results if r.evaluations]
    rows = {r.pool: row_table(problems, candidates, r.evaluations) for r in measured}
    stats = [(r.gpu_kind, aggregates(rows[r.pool], threshold)) for r in measured]
    moved = [(measured[0].gpu_kind, r.gpu_kind, gaps(rows[measured[0].pool], rows[r.pool],
                                                     measured[0].gpu_kind, r.gpu_kind)) for r in measured[1:]]
    origins = {c.origin for c in candidates}
    columns = tuple(c for c in COLUMNS if c == "eager" or baseline_origin(c) in origins)
    return Reproduction(rows, stats, moved, columns, {r.pool: r.gpu_kind for r in measured})


def render_reproduction(rep: Reproduction, threshold: float) -> str:
    """The baseline columns in the paper's layout, then the rows that moved between GPUs with a reason."""
    lines = ["", "## Speedup per baseline", "",
             "A program's speedup over a baseline is its speedup over eager divided by the baseline's (the "
             "template rewrite of the same reference, measured under the same protocol). `1e-2` is CUDA-L1's "
             "tolerance; `strict` is atol = rtol = 1e-4. Statistics over the rows that succeed, out of all rows."]
    lines += aggregate_table(rep.stats, threshold, rep.columns)
    for kind_a, kind_b, moved in rep.moved:
        lines += ["", f"## Rows whose {kind_a} and {kind_b} speedups differ by more than 25%", ""]
        if not moved:
            lines.append("None.")
            continue
        lines += [f"| row | {kind_a} | {kind_b} | reason |", "| --- | --- | --- | --- |"]
        for m in moved:
            fa, fb = (("-" if m[k] is None else f"{m[k]:.2f}") for k in (kind_a, kind_b))
            lines.append(f"| {m['problem_id']} | {fa} | {fb} | {m['reason']} |")
    return "\n".join(lines) + "\n"


def write_tables(rows: Sequence[dict[str, Any]], out_dir: str | Path, title: str, threshold: float,
                 rep: Reproduction | None = None, name: str = "cross_gpu", command: str = "") -> dict[str, Path]:
    """<name>.md, <name>.csv and <name>.json under ``out_dir``; with ``rep``, the baseline columns in the
    markdown and one per-row table per GPU, <name>-rows-<GPU>.csv (a row per problem). ``command``, the
    one that regenerates them, heads the markdown. Returns the paths by format (``rows:<pool>``)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"markdown": out / f"{name}.md", "csv": out / f"{name}.csv", "json": out / f"{name}.json"}
    text = render_markdown(rows, title, threshold, command)
    if rep is not None:
        text += render_reproduction(rep, threshold)
        for pool, table in rep.rows.items():
            kind = rep.kinds.get(pool, pool)
            per_row = [{"gpu": kind, **row} for row in table]
            if per_row:
                paths[f"rows:{pool}"] = out / f"{name}-rows-{_file_part(kind)}.csv"
                with paths[f"rows:{pool}"].open("w", newline="") as f:
                    writer = csv.DictWriter(f, fieldnames=list(per_row[0]))
                    writer.writeheader()
                    writer.writerows(per_row)
    paths["markdown"].write_text(text)
    columns = ["gpu", "pool", "status", "evaluations", *STAT_KEYS, "device_names", "message"]
    with paths["csv"].open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows([{k: r[k] for k in columns} for r in rows])
    document: dict[str, Any] = {"threshold": threshold, "gpus": list(rows)}
    if rep is not None:
        document["baselines"] = [{"gpu": kind, **s} for kind, stats in rep.stats for s in stats]
        document["moved"] = [{"gpus": [a, b], "rows": moved} for a, b, moved in rep.moved]
    paths["json"].write_text(json.dumps(document, indent=2) + "\n")
    return paths
