"""Paper-format tables from evaluation records: statistics over correct problems, failures counted."""

from __future__ import annotations

import json

import pytest

from cudal1.candidates import Candidate, Evaluation, Status
from cudal1.problems import Problem
from cudal1.reports import build_report, render_markdown, summarize, write_report

PROBLEMS = [Problem(f"p{i}", level, f"n{i}", f"src{i}") for i, level in enumerate([1, 1, 1, 2, 2])]
CANDIDATES = [Candidate("p0", "a", "template:baseline"), Candidate("p0", "b", "teacher:x"),
              Candidate("p1", "c", "teacher:x"), Candidate("p2", "d", "teacher:x"), Candidate("p3", "e", "teacher:x")]


def _evaluation(candidate: Candidate, status: Status, speedup: float | None = None) -> Evaluation:
    return Evaluation(candidate.problem_id, candidate.candidate_id, status, speedup=speedup)


EVALUATIONS = [
    _evaluation(CANDIDATES[0], Status.OK, 1.0),
    _evaluation(CANDIDATES[1], Status.OK, 3.0),  # p0's best: 3.0
    _evaluation(CANDIDATES[2], Status.OK, 0.5),
    _evaluation(CANDIDATES[3], Status.INCORRECT),  # p2 fails; p4 has no candidate at all
    _evaluation(CANDIDATES[4], Status.OK, 1.005),  # above 1 but not above the 1.01 threshold
]


def test_statistics_follow_the_paper():
    report = build_report(PROBLEMS, CANDIDATES, EVALUATIONS, threshold=1.01)
    assert report.overall == {"mean": pytest.approx((3.0 + 0.5 + 1.005) / 3), "max": 3.0,
                              "p75": pytest.approx(2.0025), "p50": 1.005, "p25": pytest.approx(0.7525),
                              "success": 3, "above_threshold": 1, "total": 5}
    assert report.levels[1]["success"] == 2 and report.levels[1]["total"] == 3
    assert report.levels[2] == summarize([1.005], 2, 1.01)
    assert report.origins["template:baseline"]["max"] == 1.0 and report.origins["template:baseline"]["success"] == 1
    assert report.origins["teacher:x"]["success"] == 3
    assert report.statuses == {"incorrect": 1, "ok": 4}
    p0 = next(r for r in report.per_problem if r["problem_id"] == "p0")
    assert p0["origin"] == "teacher:x" and p0["correct"] == 2


def test_no_success_gives_nulls_not_zeros():
    row = summarize([], total=4, threshold=1.01)
    assert row["mean"] is None and row["success"] == 0 and row["total"] == 4


def test_report_files(tmp_path):
    report = build_report(PROBLEMS, CANDIDATES, EVALUATIONS)
    paths = write_report(report, tmp_path / "reports", "Test report")
    metrics = json.loads(paths["metrics"].read_text())
    assert metrics["levels"]["level2"]["total"] == 2 and metrics["overall"]["above_threshold"] == 1
    markdown = paths["markdown"].read_text()
    assert markdown.startswith("# Test report")
    assert "| Level 1 | 1.75 | 3.00 | 2.38 | 1.75 | 1.12 | 2/3 | 1/3 |" in markdown
    assert paths["speedups_csv"].read_text().splitlines()[0] == "problem_id,level,name,speedup,origin,candidates,correct"
    assert paths["levels_csv"].read_text().splitlines()[-1].startswith("all,")
    for png in ("histogram_png", "levels_png"):
        assert paths[png].read_bytes()[:4] == b"\x89PNG"
    assert "| p4 n4 | 2 | - | - | 0/0 |" in render_markdown(report, "t")


def test_the_report_shows_each_self_supervised_round(tmp_path):
    from flows.report import read_rounds
    from flows.self_supervised import COLUMNS
    from tasks.learning import write_plot_csv

    rounds = [{"round": 0, "samples": 60, "correct": 30, "success_rate": 0.5, "problems_solved": 12, "new_correct": 9,
               "pool_correct": 41, "generated_tokens": 5000, "evaluated": 20, "finetune_last_loss": 0.3},
              {"round": 1, "samples": 60, "correct": 45, "success_rate": 0.75, "problems_solved": 14, "new_correct": 4,
               "pool_correct": 45, "generated_tokens": 5100, "evaluated": 12, "finetune_last_loss": ""}]
    write_plot_csv(rounds, tmp_path / "rounds.csv", COLUMNS)  # what the self_supervised stage writes
    read = read_rounds(str(tmp_path / "rounds.csv"))
    assert read[1] == {"round": 1, "samples": 60, "correct": 45, "success_rate": 0.75, "problems_solved": 14,
                       "new_correct": 4, "pool_correct": 45}
    report = build_report(PROBLEMS, CANDIDATES, EVALUATIONS, rounds=read)
    markdown = render_markdown(report, "t")
    assert "## Self-supervised rounds" in markdown
    assert "| 0 | 30/60 | 0.50 | 12 | 9 | 41 |" in markdown and "| 1 | 45/60 | 0.75 | 14 | 4 | 45 |" in markdown
    assert report.metrics()["self_supervised"]["round1"] == {"samples": 60, "correct": 45, "success_rate": 0.75,
                                                             "problems_solved": 14, "new_correct": 4, "pool_correct": 45}
    assert "self_supervised" not in build_report(PROBLEMS, CANDIDATES, EVALUATIONS).metrics()
