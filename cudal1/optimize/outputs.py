"""What `cudal1 optimize` leaves in its folder: ``candidates.parquet`` (every candidate, ranked),
``best.py`` (the fastest that passed, with a header saying how it was measured), ``report.md`` with
``speedup_by_round.png``, and ``prompts.jsonl`` (what each model was asked in each round)."""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path
from typing import Any

from cudal1.optimize.state import RunState, no_program_messages, rank_key

COLUMNS = ("rank", "round", "origin", "candidate_id", "status", "reason", "speedup", "speedup_low", "speedup_high",
           "reference_ms", "candidate_ms", "trials", "max_abs_error", "flags", "sha256", "source")


def ranked_rows(state: RunState) -> list[dict[str, Any]]:
    """Every candidate: those that passed first, fastest (by the low end of the interval) first; then the
    rest in the order they were written."""
    rows = []
    for order, (sha, entry) in enumerate(state.entries.items()):
        e = state.evaluations.get(sha)
        c = entry.candidate
        row = {"round": entry.round, "origin": c.origin, "candidate_id": c.candidate_id, "sha256": sha,
               "source": c.source, "speedup": None, "speedup_low": None, "speedup_high": None,
               "reference_ms": None, "candidate_ms": None, "trials": 0, "max_abs_error": None, "flags": [],
               "_order": order}
        if entry.malformed:
            row |= {"status": "malformed", "reason": f"no program in the answer: {entry.malformed}"}
        elif e is None:
            why = "the run was interrupted" if state.interrupted else "the time budget ran out"
            row |= {"status": "not_measured", "reason": f"{why} before it was measured; rerun the same command"}
        else:
            row |= {"status": e.status.value, "reason": e.reason, "speedup": e.speedup, "speedup_low": e.speedup_low,
                    "speedup_high": e.speedup_high, "reference_ms": e.reference_ms, "candidate_ms": e.candidate_ms,
                    "trials": e.trials, "max_abs_error": e.max_abs_error, "flags": list(e.flags),
                    "_key": rank_key(e)}
        rows.append(row)
    rows.sort(key=lambda r: (r.get("_key") is None, -(r.get("_key") or 0.0), -(r["speedup"] or 0.0), r["_order"]))
    for rank, row in enumerate(rows, 1):
        row["rank"] = rank
        row.pop("_order")
        row.pop("_key", None)
    return rows


def best_row(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    return next((r for r in rows if r["status"] == "ok"), None)


def interval(row: dict[str, Any]) -> str:
    if row["speedup"] is None:
        return "-"
    low, high = row["speedup_low"], row["speedup_high"]
    return f"{low:.2f}-{high:.2f}x" if low is not None and high is not None else "-"


def tolerance_text(state: RunState) -> str:
    tol = state.config.tolerance
    if tol is not None:
        return f"atol = rtol = {tol:g}"
    t = state.config.tolerances
    return "per output dtype: " + ", ".join(f"{k} {v[0]:g}" for k, v in t.items()) + " (atol = rtol)"


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_table(rows: list[dict[str, Any]], path: Path) -> None:
    import polars as pl

    schema = {"rank": pl.Int64, "round": pl.Int64, "origin": pl.String, "candidate_id": pl.String,
              "status": pl.String, "reason": pl.String, "speedup": pl.Float64, "speedup_low": pl.Float64,
              "speedup_high": pl.Float64, "reference_ms": pl.Float64, "candidate_ms": pl.Float64,
              "trials": pl.Int64, "max_abs_error": pl.Float64, "flags": pl.List(pl.String), "sha256": pl.String,
              "source": pl.String}
    tmp = path.with_name(path.name + ".partial")
    pl.DataFrame([{k: r[k] for k in COLUMNS} for r in rows], schema=schema).write_parquet(tmp)
    os.replace(tmp, path)


def best_header(state: RunState, row: dict[str, Any], when: dt.datetime) -> str:
    e = state.evaluations[row["sha256"]]
    faster = (row["speedup_low"] or 0.0) > 1.0
    verdict = "" if faster else " - NOT measurably faster than your module: its interval reaches 1.0x or below"
    lines = [
        f"cudal1 optimize: the fastest variant of {state.module.path.name} that passed every check{verdict}",
        f"speedup {row['speedup']:.2f}x over {state.module.model_class} (95% interval {interval(row)}), median of "
        f"{row['trials']} paired timing trials; reference {row['reference_ms']:.4g} ms, this {row['candidate_ms']:.4g} ms "
        "per call",
        f"device: {state.config.device} ({e.device_name}); tolerance: {tolerance_text(state)}; largest error seen "
        f"{(row['max_abs_error'] or 0.0):.2g}",
        f"candidate {row['candidate_id']} by {row['origin']} in round {row['round']}; measured "
        f"{when:%Y-%m-%d %H:%M} UTC; protocol {state.config.hash}",
        f"command: {state.command or '(the Python API)'}",
        f"use ModelNew in place of {state.module.model_class}: same constructor arguments, same outputs within the "
        "tolerance",
    ]
    return "".join(f"# {line}\n" for line in lines)


def write_best(state: RunState, row: dict[str, Any] | None, when: dt.datetime) -> None:
    path = state.out_dir / "best.py"
    if row is None:
        path.unlink(missing_ok=True)  # a best.py from another module or protocol would mislead
        return
    _atomic_write(path, best_header(state, row, when) + "\n" + row["source"].rstrip("\n") + "\n")


def plot_rounds(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on servers and CI
    import matplotlib.pyplot as plt

    ok = [r for r in rows if r["status"] == "ok" and r["speedup"] is not None]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for r in ok:
        same = [o for o in ok if o["round"] == r["round"]]
        x = r["round"] + (0.0 if len(same) == 1 else 0.5 * (same.index(r) / (len(same) - 1) - 0.5))
        low, high = r["speedup_low"] or r["speedup"], r["speedup_high"] or r["speedup"]
        ax.errorbar([x], [r["speedup"]], yerr=[[r["speedup"] - low], [high - r["speedup"]]], fmt="o", ms=4,
                    color="#4C72B0" if r["origin"].startswith("template") else "#DD8452", capsize=2)
    rounds = sorted({r["round"] for r in rows}) or [1]
    for k in rounds:
        so_far = [r for r in ok if r["round"] <= k]
        if so_far:  # the best so far (best.py's ranking: the interval's low end), drawn across its round
            top = max(so_far, key=lambda r: r["speedup_low"] if r["speedup_low"] is not None else r["speedup"])
            ax.hlines(top["speedup"], k - 0.4, k + 0.4, color="#55A868",
                      label="best so far" if k == rounds[0] else None)
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1, label="your module")
    ax.set_xticks(rounds)
    ax.set_xlim(rounds[0] - 0.6, rounds[-1] + 0.6)
    ax.set_xlabel("round (blue: template teacher, orange: models)")
    ax.set_ylabel("speedup (x), 95% interval")
    ax.set_title(f"{len(ok)} of {len(rows)} candidates passed")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def messages(state: RunState) -> list[str]:
    return state.messages + [m for m in no_program_messages(state) if m not in state.messages]


def report_text(state: RunState, rows: list[dict[str, Any]], when: dt.datetime) -> str:
    best = best_row(rows)
    lines = [f"# cudal1 optimize: {state.module.path.name}", "",
             f"- command: `{state.command or '(the Python API)'}`",
             f"- measured {when:%Y-%m-%d %H:%M} UTC on {state.config.device}; tolerance {tolerance_text(state)}; "
             f"protocol {state.config.hash}",
             f"- rounds: {state.rounds_done}; stopped: {state.stop or 'running'}",
             f"- candidates: {len(rows)}, passed: {sum(r['status'] == 'ok' for r in rows)}; measured in this run: "
             f"{state.measured_now}, by earlier runs: {len(state.reused)}"]
    if best is not None:
        lines.append(f"- best: {best['speedup']:.2f}x (95% interval {interval(best)}) by {best['origin']}, round "
                     f"{best['round']}: `best.py`")
    else:
        lines.append("- no candidate passed: no best.py")
    lines += ["", "![speedup by round](speedup_by_round.png)", "", "## Top five", "",
              "| rank | round | origin | speedup | 95% interval | status |", "|---|---|---|---|---|---|"]
    for r in rows[:5]:
        speed = "-" if r["speedup"] is None else f"{r['speedup']:.2f}x"
        lines.append(f"| {r['rank']} | {r['round']} | {r['origin']} | {speed} | {interval(r)} | {r['status']} |")
    failed = [r for r in rows if r["status"] != "ok"]
    if failed:
        lines += ["", "## Candidates that did not pass", "", "| status | origin | reason |", "|---|---|---|"]
        lines += [f"| {r['status']} | {r['origin']} | {r['reason'][:160].replace('|', '/')} |" for r in failed[:20]]
    notes = messages(state)
    if notes:
        lines += ["", "## Messages", ""] + [f"- {m}" for m in notes]
    lines += ["", "Every candidate is in `candidates.parquet` (ranked by the low end of its speedup interval); "
              "what each model was asked is in `prompts.jsonl`.", ""]
    return "\n".join(lines)


def write_outputs(state: RunState) -> list[dict[str, Any]]:
    """All of the folder's outputs from the state as it is: after each round, at the end, on Ctrl-C."""
    when = dt.datetime.now(dt.timezone.utc)
    rows = ranked_rows(state)
    write_table(rows, state.out_dir / "candidates.parquet")
    write_best(state, best_row(rows), when)
    plot_rounds(rows, state.out_dir / "speedup_by_round.png")
    _atomic_write(state.out_dir / "report.md", report_text(state, rows, when))
    _atomic_write(state.out_dir / "prompts.jsonl", "".join(json.dumps(p) + "\n" for p in state.prompts))
    return rows
