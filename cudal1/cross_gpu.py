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
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cudal1.candidates import Candidate, Evaluation
from cudal1.evaluator.config import EvalConfig
from cudal1.problems import Problem
from cudal1.reports import STAT_KEYS, best_per_problem, summarize

# What happened to one pool's run. Only "completed" rows are complete; the others show what landed.
POOL_STATUSES = ("completed", "timed_out", "failed", "no_deployment")


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
    protocol = json.loads(json.dumps(config.to_dict()))  # tuples -> lists: YAML-safe
    protocol.pop("device", None)  # set per device by the evaluator
    return {
        "problems": "../inputs/problems.parquet",
        "candidates": "../inputs/candidates.parquet",
        "reuse": [],
        "out": "evaluations.parquet",
        "devices": list(devices),
        "protocol": protocol,
        "measurements_cache": "measurements.parquet",
    }


def partial_evaluations(pool_dir: Path, config: EvalConfig, candidates: Sequence[Candidate]) -> list[Evaluation]:
    """What a pool measured so far, from its incremental measurements file(s): used when its run did
    not complete (worker killed, cancelled after a timeout), so finished evaluations still count."""
    from cudal1.candidates import load_evaluations

    by_sha: dict[tuple[str, str], Candidate] = {(c.problem_id, c.sha256): c for c in candidates}
    found: dict[str, Evaluation] = {}
    for path in sorted(q for q in pool_dir.glob("measurements*.parquet") if ".partial" not in q.name):
        for e in load_evaluations(path):
            c = by_sha.get((e.problem_id, e.candidate_sha256))
            if e.config_hash == config.hash and c is not None:
                found[c.candidate_id] = e
    return list(found.values())


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


def table_rows(results: Sequence[PoolResult], problems: Sequence[Problem], threshold: float) -> list[dict[str, Any]]:
    """One row per pool: the paper's statistics over the problems its best candidate solved."""
    ids = {p.problem_id for p in problems}
    rows = []
    for r in results:
        best = best_per_problem([e for e in r.evaluations if e.problem_id in ids])
        stats = summarize(list(best.values()), len(problems), threshold)
        names = sorted({e.device_name for e in r.evaluations if e.device_name})
        rows.append({"gpu": r.gpu_kind, "pool": r.pool, "status": r.status, "evaluations": len(r.evaluations),
                     "device_names": ", ".join(names), **stats, "message": r.message})
    return rows


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def render_markdown(rows: Sequence[dict[str, Any]], title: str, threshold: float) -> str:
    head = ["GPU", "Mean", "Max", "75%", "50%", "25%", "Success", f"Speedup>{threshold:g}", "Run"]
    lines = [f"# {title}", "",
             "Speedup = reference time / candidate time, measured on each GPU kind; a problem's score is its "
             "best correct candidate; statistics over the problems with one.", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["gpu"], *(_fmt(r[k]) for k in ("mean", "max", "p75", "p50", "p25")),
                 f"{r['success']}/{r['total']}", f"{r['above_threshold']}/{r['total']}", r["status"]]
        lines.append("| " + " | ".join(cells) + " |")
    notes = [f"- {r['gpu']} (pool `{r['pool']}`): {r['message']}" for r in rows if r["message"]]
    if notes:
        lines += ["", "## Notes", "", *notes]
    return "\n".join(lines) + "\n"


def write_tables(rows: Sequence[dict[str, Any]], out_dir: str | Path, title: str, threshold: float) -> dict[str, Path]:
    """cross_gpu.md, cross_gpu.csv and cross_gpu.json under ``out_dir``; returns the paths by format."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"markdown": out / "cross_gpu.md", "csv": out / "cross_gpu.csv", "json": out / "cross_gpu.json"}
    paths["markdown"].write_text(render_markdown(rows, title, threshold))
    columns = ["gpu", "pool", "status", "evaluations", *STAT_KEYS, "device_names", "message"]
    with paths["csv"].open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows([{k: r[k] for k in columns} for r in rows])
    paths["json"].write_text(json.dumps({"threshold": threshold, "gpus": list(rows)}, indent=2) + "\n")
    return paths
