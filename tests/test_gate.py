"""The promotion gate's rule (cudal1.gate): pure, no model and no tracking store."""

from __future__ import annotations

import pytest

from cudal1.gate import Margin, decide, figures


def test_figures_count_success_over_all_problems_and_speedups_over_common_ones():
    new = {"a": 2.0, "b": 1.0, "c": 4.0}
    champion = {"a": 1.0, "b": 3.0}
    f = figures(new, champion, problems=5)
    assert (f.solved, f.success_rate, f.common) == (3, 0.6, 2)
    assert f.mean_speedup == pytest.approx(7 / 3)
    assert f.mean_speedup_common == pytest.approx(1.5) and f.median_speedup_common == pytest.approx(1.5)


def test_first_version_is_promoted_without_a_champion():
    decision = decide({}, None, problems=3)
    assert decision.promote and decision.champion is None and "first version" in decision.reason
    assert decision.metrics()["promoted"] == 1 and decision.metrics()["new.solved"] == 0


def test_fewer_problems_solved_is_never_promoted_whatever_the_speedup():
    decision = decide({"a": 9.0}, {"a": 1.0, "b": 1.0}, problems=3)
    assert not decision.promote and "solves 1 of 3" in decision.reason


def test_more_problems_solved_is_promoted_only_above_the_success_margin():
    assert decide({"a": 1.0, "b": 1.0}, {"a": 1.0}, problems=4).promote
    kept = decide({"a": 1.0, "b": 1.0}, {"a": 1.0}, problems=4, margin=Margin(success_rate=0.5))
    assert not kept.promote and "below the margin" in kept.reason


def test_same_problems_solved_compares_mean_speedup_over_the_common_ones_with_the_margin():
    champion = {"a": 1.0, "b": 2.0}
    better = decide({"a": 1.1, "b": 2.2}, champion, problems=2, margin=Margin(speedup=0.05))
    assert better.promote and "+10.0%" in better.reason
    within = decide({"a": 1.02, "b": 2.04}, champion, problems=2, margin=Margin(speedup=0.05))
    assert not within.promote
    assert within.metrics()["champion.mean_speedup_common"] == pytest.approx(1.5)
    # Equal success but disjoint problems: nothing to compare, the champion stays.
    assert not decide({"c": 5.0, "d": 5.0}, champion, problems=4).promote


def test_negative_margins_and_empty_problem_sets_are_refused():
    with pytest.raises(ValueError, match="non-negative"):
        Margin(speedup=-0.1)
    with pytest.raises(ValueError, match="at least one problem"):
        figures({}, None, problems=0)
