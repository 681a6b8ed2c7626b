"""benchmarks/graph_levels.py tells a reference's two speed levels apart from one spread: a split needs a
step between consecutive times and enough calls on each side of it, and its rounds alternate the kinds."""

from __future__ import annotations

import torch
from scripts import load_script


def test_a_step_with_calls_on_both_sides_is_two_levels_and_one_odd_call_is_not() -> None:
    levels = load_script("graph_levels").levels
    two = levels([100.0, 101.0, 102.0, 103.0, 137.0, 138.0, 139.0, 141.0])
    assert two["split"] and two["low_ms"] == 101.5 and two["high_ms"] == 138.5 and two["high_share"] == 0.5
    one_odd = levels([100.0] * 19 + [150.0])  # one call in twenty: an outlier, not a level
    assert not one_odd["split"] and one_odd["spread"] == 0.5


def test_off_the_gpu_only_eager_calls_are_timed_and_the_graph_is_named_missing() -> None:
    model = torch.nn.Linear(8, 8).eval()
    row = load_script("graph_levels").measure_row(model, [torch.randn(4, 8)], rounds=3, calls=2, cuda=False)
    assert "graph" not in row and "CUDA graphs" in row["graph_error"]
    assert len(row["eager"]["ms"]) == 3 and all(len(r) == 2 and min(r) > 0 for r in row["eager"]["ms"])


def test_the_cpu_probe_is_timed_after_every_call_and_set_beside_the_calls() -> None:
    model = torch.nn.Linear(8, 8).eval()
    row = load_script("graph_levels").measure_row(model, [torch.randn(4, 8)], rounds=2, calls=3, cuda=False, probe=True)
    eager = row["eager"]
    assert len(eager["probe_ms"]) == 6 and min(eager["probe_ms"]) > 0 and len(eager["probe_round_medians"]) == 2
    assert eager["calls_follow_probe_r"] is None or -1 <= eager["calls_follow_probe_r"] <= 1
    # steal: a share of each round's wall where this kernel reports it (Linux), never negative
    assert len(eager["steal_share_rounds"]) == 2
    assert all(s is None or 0 <= s <= 1.5 for s in eager["steal_share_rounds"])


def test_steal_ticks_reads_the_cores_named_and_none_for_a_core_that_is_not_there() -> None:
    steal_ticks = load_script("graph_levels").steal_ticks
    here = steal_ticks({0})
    assert here is None or here >= 0
    assert steal_ticks({10_000}) is None


def test_the_timeline_times_every_row_each_round_and_says_whether_they_move_together() -> None:
    models = {name: (torch.nn.Linear(n, n).eval(), [torch.randn(4, n)]) for name, n in (("a", 8), ("b", 64))}
    out = load_script("graph_levels").timeline(models, rounds=4, calls=3, gap_s=0.0, cuda=False)
    assert len(out["t_s"]) == len(out["probe_ms"]) == 4 and out["t_s"] == sorted(out["t_s"])
    assert set(out["round_medians"]) == {"a", "b"} and all(len(xs) == 4 and min(xs) > 0 for xs in out["round_medians"].values())
    for row in out["rows"].values():
        assert set(row) == {"levels", "lag1", "follows_rows_r", "follows_probe_r"}
        assert row["lag1"] is None or -1 <= row["lag1"] <= 1
