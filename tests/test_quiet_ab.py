"""benchmarks/quiet_ab.py evaluates a problem's reference against itself with the candidate stopped for
the reference's batches and not, on the evaluator's own path, and reads each arm's trials by which
program went first."""

from __future__ import annotations

import os

from scripts import load_script

from cudal1.problems import load_starter_suite


def test_both_arms_evaluate_the_reference_against_itself_and_record_every_trial() -> None:
    quiet_ab = load_script("quiet_ab")
    rows = quiet_ab.measure(load_starter_suite()[:1], rounds=1, device="cpu")
    assert [r["arm"] for r in rows] == ["quiet", "awake"]
    for row in rows:
        assert row["status"] == "ok" and row["speedup"] > 0
        assert len(row["trials"]) >= 3 and {t["ref_first"] for t in row["trials"]} <= {True, False}
        assert all(t["ratio"] > 0 and t["ref_ms"] > 0 for t in row["trials"])
    assert not os.environ.get("CUDAL1_TIMING_TRACE")  # the trace was on for these evaluations only
    summary = quiet_ab.summarise(rows)
    assert summary["quiet"]["evaluations"] == summary["awake"]["evaluations"] == 1
