"""benchmarks/trial_estimators.py on two small run folders written here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.trial_estimators import ESTIMATORS, gaps, quantile


def _run(path: Path, trials: dict[str, list[list[float]]], failed: str = "") -> Path:
    path.mkdir()
    rows = [{"problem_id": pid, "candidate_id": "c", "status": "ok", "speedup": 1.0, "extra": {"trial_ms": t}}
            for pid, t in trials.items()]
    rows.append({"problem_id": failed or "X", "candidate_id": "c", "status": "incorrect", "extra": {}})
    (path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_each_figure_is_compared_over_the_rows_ok_in_both(tmp_path: Path) -> None:
    a = _run(tmp_path / "a", {"A": [[2.0, 1.0], [4.0, 1.0], [3.0, 1.0]], "B": [[1.0, 1.0]] * 3})
    # B's reference reads 10% slower in the second run; A's one trial that moved (4.0 -> 3.0) moves no figure
    b = _run(tmp_path / "b", {"A": [[2.0, 1.0], [3.0, 1.0], [3.0, 1.0]], "B": [[1.1, 1.0]] * 3, "C": [[1.0, 1.0]]})
    out = gaps([[a, b]])
    assert set(out) == set(ESTIMATORS) and all(len(v) == 2 for v in out.values())  # A and B only
    assert sorted(out["median of the trials' ratios"]) == pytest.approx([0.0, 0.1])
    assert sorted(out["each side's fastest trial"]) == pytest.approx([0.0, 0.1])


def test_quantile_interpolates() -> None:
    assert quantile([1.0, 2.0, 3.0, 4.0, 5.0], 0.25) == 2.0
    assert quantile([1.0, 3.0], 0.5) == 2.0
    assert quantile([7.0], 0.1) == 7.0
