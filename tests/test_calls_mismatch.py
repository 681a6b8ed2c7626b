"""benchmarks/calls_mismatch.py: runs of a row split by whether their calls per trial were far apart, on
rows whose answer is known and on the committed GPU runs."""

from __future__ import annotations

from pathlib import Path

from benchmarks.calls_mismatch import by_calls, run_groups
from cudal1.candidates import Evaluation, Status

ROOT = Path(__file__).resolve().parents[1]


def _row(pid: str, speedup: float, calls: int) -> Evaluation:
    return Evaluation(pid, "c", Status.OK, speedup=speedup, extra={"iters_per_trial": calls})


def test_pairs_split_by_their_calls_per_trial() -> None:
    runs = [{"A": _row("A", 1.0, 100), "B": _row("B", 2.0, 50)},
            {"A": _row("A", 1.1, 5), "B": _row("B", 2.0, 40)},  # A: 20x fewer calls, 10% off
            {"A": _row("A", 1.0, 90), "B": _row("B", 2.2, 60)}]
    got = by_calls([runs])
    assert got["apart"]["rows"] == 2 and got["apart"]["median"] == 0.0955  # A's two pairs with its 5-call run
    assert got["alike"]["rows"] == 4 and got["same_rows_alike"] == {"rows": 1, "median": 0.0, "p95": 0.0}


def test_the_committed_runs() -> None:
    groups = run_groups(ROOT / "docs" / "benchmarks" / "fast-core-h200")
    assert sorted(len(g) for g in groups) == [3, 6]  # the half release's three runs, the A/B's six
    got = by_calls(groups)
    assert got["apart"]["rows"] == 25 and got["alike"]["rows"] == 471
    assert got["apart"]["median"] > got["same_rows_alike"]["median"] > got["alike"]["median"]
