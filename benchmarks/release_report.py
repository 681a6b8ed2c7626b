"""Turn a release re-measurement (benchmarks/release_eval.py's results.jsonl) into the reproduction
page: reported vs measured per row, the paper-format summary, and the rows that moved by more than 25%
with the reason for each.

    python benchmarks/release_report.py --release ../shared/cuda-l1/h100.jsonl \
        --results docs/reproduction/h100-results.jsonl --out docs/reproduction
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cudal1.candidates import Evaluation, load_evaluations  # noqa: E402
from cudal1.evaluator.bindings import binding_problems  # noqa: E402
from cudal1.problems import load_cudal1_release  # noqa: E402
from cudal1.reproduction import strict_verdict  # noqa: E402

RELEASE_COLUMNS = ("level", "has_code", "reported")  # the release's own facts, read from ../shared


def why(e: Evaluation | None, reported: float | None, fault: list[str] | None = None) -> str:
    if e is None:
        return "not measured in this run"
    notes = []
    if "degenerate_problem" in e.flags:
        notes.append("degenerate problem: the reference's output does not depend on its inputs, so a constant wins")
    if "shares memory with an input" in e.reason:
        notes.append("the program works in place on its input and returns it (torch.relu_(x) and the like): "
                     "the caller's tensor is overwritten")
    if e.harness_failed:
        return f"not measured: the harness failed, not the program ({e.reason[:140]})"
    if "not reproduced" in e.reason:
        notes.append("unconfirmed rather than caught: the two measurements disagree by more than CUDA-L1's 10%, "
                     "and our own run-to-run spread on this machine reaches that (docs/reproduction/h100.md)")
    if "extension_build_failed" in e.flags:
        if fault:
            notes.append(f"its CUDA extension cannot build with any torch ({fault[0]}): the program's "
                         "PyTorch fallback was measured, as it must have been wherever the row was measured")
        else:
            notes.append("its CUDA extension did not compile here: the program's PyTorch fallback was measured")
    if not e.ok:
        return "; ".join([f"{e.status.value}: {e.reason[:160]}", *notes])
    if "noisy" in e.flags:
        notes.append("noisy timing (spread over 15% after re-measuring)")
    if reported and e.speedup and e.speedup < reported:
        notes.append("timing-method difference: fresh inputs every call, L2 flushed, device-wide sync; "
                     "CUDA-L1's harness rotates nothing and flushes nothing")
    if reported and e.speedup and e.speedup > reported:
        notes.append("faster here than reported (their harness's own overheads, or a different driver/software stack)")
    return "; ".join(notes) or "within noise"


def _status(e: Evaluation) -> str:
    """The row's verdict; a harness failure is not the program's (it counts as not measured)."""
    return "harness_failed" if e.harness_failed else e.status.value


def summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    q = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    return {"mean": statistics.fmean(values), "max": max(values), "p75": q[2], "p50": q[1], "p25": q[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--release", required=True, type=Path)
    ap.add_argument("--results", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--device-note", default="the GPU named in each row (the latest measurement of a row counts)")
    ap.add_argument("--side-by-side", type=Path, default=None,
                    help="also write the moved rows with the release's reported score beside ours to this file "
                         "(outside the repository: the release's rows are read from ../shared, never copied)")
    args = ap.parse_args()
    rows = load_cudal1_release(args.release)
    measured = {e.problem_id: e for e in load_evaluations(args.results) if not e.candidate_id.startswith("template")}
    args.out.mkdir(parents=True, exist_ok=True)
    table = []
    for r in rows:
        e = measured.get(r.problem.problem_id)
        rep = r.reported.get("score_default")
        table.append({
            "problem_id": r.problem.problem_id, "level": r.problem.level, "has_code": r.candidate_source is not None,
            "reported": rep, "status": _status(e) if e else ("no code" if r.candidate_source is None else "not run"),
            "strict_status": strict_verdict(e) if e else "", "measured": e.speedup if e else None,
            "recheck": e.extra.get("recheck_speedup") if e else None,
            "reference_ms": e.reference_ms if e else None, "candidate_ms": e.candidate_ms if e else None,
            "flags": ",".join(e.flags) if e else "", "reason": (e.reason if e else "")[:200],
            "device": e.device_name if e else "",
        })
    run = [t for t in table if t["status"] not in ("no code", "not run")]
    sources = {r.problem.problem_id: r.candidate_source for r in rows}
    unmeasured = sum(t["status"] == "harness_failed" for t in run)
    # Only what was measured here: the release (its rows, levels, reported scores) stays in ../shared and is
    # joined back by problem_id when this page is made, never copied into the repository.
    ours = [k for k in table[0] if k not in RELEASE_COLUMNS]
    with (args.out / "h100-rows.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=ours, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(run)
    ok = [t for t in run if t["status"] == "ok"]
    lines = [f"Rows evaluated: {len(run)} of {sum(t['has_code'] for t in table)} with code "
             f"({sum(not t['has_code'] for t in table)} rows of the release carry no program; {unmeasured} not measured "
             f"because the harness failed). Device: {args.device_note}.",
             "", "| set | n | mean | max | p75 | p50 | p25 | > 1.01× |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for label, values in (("reported, same rows", [t["reported"] for t in ok if t["reported"] is not None]),
                          ("measured (1e-2)", [t["measured"] for t in ok]),
                          ("measured, strict-correct only", [t["measured"] for t in ok if t["strict_status"] == "ok"])):
        s = summary(values)
        if s:
            lines.append(f"| {label} | {len(values)} | {s['mean']:.2f} | {s['max']:.2f} | {s['p75']:.2f} | "
                         f"{s['p50']:.2f} | {s['p25']:.2f} | {sum(v > 1.01 for v in values)} |")
    failed = [t for t in run if "extension_build_failed" in t["flags"]]
    # The program's own build fault, read from its source once per failed row.
    faults = {t["problem_id"]: binding_problems(sources.get(t["problem_id"]) or "") for t in failed}
    unbuildable = [pid for pid, fault in faults.items() if fault]
    lines += ["", f"Extensions that did not build: {len(failed)} rows; in {len(unbuildable)} of them the program's own "
              "load_inline call cannot build with any torch (a bound function its C++ source never declares, or "
              "two module definitions: cudal1/evaluator/bindings.py), so the PyTorch fallback is what any harness "
              "measures for them."]
    # The tracked page lists the rows that moved with our figures only; the side-by-side file, made on
    # demand, adds the release's reported score for each.
    ours_only = ["", "| row | GPU | measured | verdict (1e-2) | strict 1e-4 | why it moved |",
                 "| --- | --- | --- | --- | --- | --- |"]
    beside = ["| row | GPU | reported | measured | verdict (1e-2) | strict 1e-4 | why it moved |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    for t in run:
        rep, got = t["reported"], t["measured"]
        if not (got is None or rep is None or abs(got - rep) / rep > 0.25):
            continue
        e = measured.get(t["problem_id"])
        shown = "-" if got is None else f"{got:.2f}"
        if got is None and t["recheck"] is not None and e is not None:
            first = e.reason.split("speedup ")[-1].split("x")[0] if "not reproduced" in e.reason else "?"
            shown = f"({first} / {t['recheck']:.2f})"
        gpu = t["device"].replace("NVIDIA ", "").replace(" 80GB HBM3", "")
        rest = f"{shown} | {t['status']} | {t['strict_status']} | {why(e, rep, faults.get(t['problem_id']))} |"
        ours_only.append(f"| {t['problem_id']} | {gpu} | {rest}")
        beside.append(f"| {t['problem_id']} | {gpu} | {rep if rep is not None else '-'} | {rest}")
    lines += ours_only
    if args.side_by_side is not None:
        args.side_by_side.write_text("\n".join(beside) + "\n")
    (args.out / "h100-table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
