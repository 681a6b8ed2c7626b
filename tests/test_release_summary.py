"""benchmarks/release_bench.py: the results files of the release runs. The committed results are what the
script derives from the raw files beside them; a run's wall is read only where it timed the whole run; pairs
of one-GPU and two-GPU runs compare only like with like."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from scripts import load_script

from cudal1.candidates import Evaluation, Status, load_evaluations, save_evaluations
from cudal1.measured import read_result

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
RELEASE = ROOT.parent / "shared" / "cuda-l1" / "h100.jsonl"
# the figure keys the docs quote (the results inventory)
KEYS = {
    "release-h200": ["programs", "rows", "cold_wall_s", "warm_wall_s", "warm_over_cold", "cold_per_program_s",
                     "warm_per_program_s", "agreement_rows", "agreement_median_pct", "agreement_p95_pct",
                     "verdict_flips", "ok", "incorrect", "rejected", "compile_error", "runtime_error", "no_program",
                     "harness_overhead_us", "evaluate_one_s", "ok_mean_speedup", "ok_median_speedup",
                     "reported_mean_speedup"],
    "two-gpu-h200": ["programs", "one_gpu_wall_s", "two_gpu_wall_s", "speedup"],
    "rl-share-h200": ["rl_eval_share_pct", "runs"],
}


def _derive(name: str, out: Path) -> list[str]:
    """release_bench.py's arguments that derive results/<name> from its raw files, writing into ``out``."""
    folder = RESULTS / name
    if name == "release-h200":
        return ["--release", str(RELEASE), "--cold", str(folder / "cold"), "--warm", str(folder / "warm"),
                "--overhead", str(folder / "overhead.json"), "--evaluate-one", str(folder / "evaluate_one.json"),
                "--out", str(out)]
    if name == "two-gpu-h200":
        return ["--one-gpu", str(folder / "one"), "--two-gpu", str(folder / "two"), "--one-gpu", str(folder / "one"),
                "--two-gpu", str(folder / "two2"), "--build-cache", "warm", "--out", str(out)]
    return ["--rl", *(str(folder / run / "learning.json") for run in ("l1", "l2", "l3")), "--out", str(out)]


@pytest.mark.parametrize("name", sorted(KEYS))
def test_a_committed_result_is_what_release_bench_derives_from_its_raw_files(name: str, tmp_path: Path) -> None:
    if name == "release-h200" and not RELEASE.exists():
        pytest.skip("../shared/cuda-l1 not present")
    committed = read_result(name)
    assert list(committed.figures)[: len(KEYS[name])] == KEYS[name]
    kept = RESULTS / name / "provenance.json"  # the runs' provenance, kept beside them (reproduction/dvc.yaml)
    provenance = ["--provenance", str(kept)] if kept.is_file() else [
        "--date", committed.date, "--commit", committed.commit, "--hardware", committed.hardware,
        "--command", committed.command, "--title", committed.title, "--notes", committed.notes]
    load_script("release_bench").main([*_derive(name, tmp_path / name), *provenance])
    again = read_result(tmp_path / name)
    assert again.figures == committed.figures and again.tables == committed.tables
    assert (again.date, again.commit, again.hardware) == (committed.date, committed.commit, committed.hardware)
    assert (again.title, again.command, again.notes) == (committed.title, committed.command, committed.notes)
    if name == "release-h200":
        assert (tmp_path / name / "rows.csv").read_text() == (RESULTS / name / "rows.csv").read_text()


def test_the_committed_release_pair_and_its_row_table() -> None:
    """Every row of the release in rows.csv with our figures only (the release's scores stay in ../shared);
    the statuses add up to the rows; every re-checked program kept its slowest measurement."""
    result = read_result("release-h200")
    with (RESULTS / "release-h200" / "rows.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == result.figures["rows"] == 250 and "reported" not in rows[0]
    assert sum(n for _, n in result.table("statuses").rows) == 250
    assert sum(r["status"] == "ok" for r in rows) == result.figures["ok"]
    assert result.table("levels").rows[-1][:4] == ["all", 250, result.figures["programs"], result.figures["ok"]]
    for run in ("cold", "warm"):
        for e in load_evaluations(RESULTS / "release-h200" / run / "results.jsonl"):
            if "recheck_speedups" in e.extra:
                assert e.speedup == min(e.extra["recheck_speedups"])


def _run(folder: Path, rows: list[Evaluation], summary: dict | None = None, calls: list[dict] | None = None) -> Path:
    folder.mkdir(parents=True)
    save_evaluations(rows, folder / "results.jsonl")
    if summary is not None:
        (folder / "summary.json").write_text(json.dumps(summary))
    if calls is not None:
        (folder / "calls.jsonl").write_text("".join(json.dumps(c) + "\n" for c in calls))
    return folder


def _rows(n: int, speedup: float = 1.0, **extra: float) -> list[Evaluation]:
    return [Evaluation(f"L1-{i + 1}", "c", Status.OK, speedup=speedup, candidate_sha256=f"s{i}", extra=dict(extra))
            for i in range(n)]


def test_a_summary_of_the_whole_run_gives_its_rate_and_one_written_by_a_resume_is_refused(tmp_path: Path) -> None:
    bench = load_script("release_bench")
    whole = _run(tmp_path / "whole", _rows(35), {"rows": 35, "evaluations": 35, "evaluated_here": 35, "wall_s": 120.4})
    assert bench.rate(whole) == pytest.approx(35 / 120.4)
    older = _run(tmp_path / "older", _rows(35), {"rows": 35, "evaluations": 35, "wall_s": 120.4})  # no count kept
    assert bench.run_summary(older)["wall_s"] == 120.4
    resumed = _run(tmp_path / "resumed", _rows(35), {"rows": 35, "evaluations": 35, "evaluated_here": 0, "wall_s": 0.2})
    with pytest.raises(SystemExit, match="resumed this folder .0 of 35 evaluations."):
        bench.rate(resumed)
    with pytest.raises(SystemExit, match="neither calls.jsonl nor summary.json"):
        bench.run_summary(_run(tmp_path / "none", _rows(1)))


def test_a_run_over_several_segments_is_their_sum_and_a_lost_segment_is_refused(tmp_path: Path) -> None:
    bench = load_script("release_bench")
    calls = [{"wall_s": 44.4, "evaluations_before": 0, "evaluations_after": 1, "stopped_by_limit": True},
             {"wall_s": 561.1, "evaluations_before": 1, "evaluations_after": 187, "exit": 0}]
    run = _run(tmp_path / "run", _rows(187), calls=calls)
    assert bench.run_summary(run) == {"evaluations": 187, "wall_s": 605.5, "calls": 2, "partial": False}
    calls[1]["evaluations_before"] = 5  # rows 2-5 came from a segment whose record is missing
    with pytest.raises(SystemExit, match="do not follow one another"):
        bench.run_summary(_run(tmp_path / "seam", _rows(187), calls=calls))
    stopped = [{"wall_s": 9.0, "evaluations_before": 0, "evaluations_after": 4, "exit": 1}]
    assert bench.run_summary(_run(tmp_path / "stopped", _rows(4), calls=stopped))["partial"]


def _pair(tmp_path: Path, name: str, walls: tuple[float, float], n: int = 4, **extra: float) -> tuple[Path, Path]:
    one = _run(tmp_path / f"{name}-one", _rows(n, row_s=1.0, host_pace_ms=1.0),
               calls=[{"wall_s": walls[0], "evaluations_before": 0, "evaluations_after": n}])
    two = _run(tmp_path / f"{name}-two", _rows(n, row_s=1.1, host_pace_ms=0.9, **extra),
               calls=[{"wall_s": walls[1], "evaluations_before": 0, "evaluations_after": n}])
    return one, two


def test_repeated_pairs_give_the_median_ratio_and_list_every_pair(tmp_path: Path) -> None:
    bench = load_script("release_bench")
    pairs = [_pair(tmp_path, name, walls) for name, walls in (("a", (100.0, 52.0)), ("b", (100.0, 50.0)),
                                                               ("c", (100.0, 55.0)))]
    figures, tables = bench.two_gpu_result([p[0] for p in pairs], [p[1] for p in pairs], "warm")
    assert [row[4] for row in tables["pairs"].rows] == [1.923, 2.0, 1.818]
    assert figures == {"programs": 4, "one_gpu_wall_s": 100.0, "two_gpu_wall_s": 52.0, "speedup": 1.923}
    assert tables["pairs"].rows[0][5:] == [1.1, 0.9]  # the rows' device time, the host's pace: two over one
    with pytest.raises(SystemExit, match="in pairs"):
        bench.two_gpu_result([pairs[0][0]], [], "warm")
    fewer = _run(tmp_path / "fewer", _rows(3), calls=[{"wall_s": 50.0, "evaluations_before": 0, "evaluations_after": 3}])
    with pytest.raises(SystemExit, match="different rows"):
        bench.two_gpu_result([pairs[0][0]], [fewer], "warm")


def test_a_run_that_built_programs_is_not_recorded_as_warm(tmp_path: Path) -> None:
    bench = load_script("release_bench")
    one, two = _pair(tmp_path, "cold", (100.0, 51.0), prebuild_s=4.2)
    assert bench.built_here(load_evaluations(two / "results.jsonl")) == ["L1-1", "L1-2", "L1-3", "L1-4"]
    with pytest.raises(SystemExit, match="was not warm"):
        bench.two_gpu_result([one], [two], "warm")
    assert bench.two_gpu_result([one], [two], "empty")[0]["speedup"] == 1.961


def test_the_rl_share_is_the_median_runs(tmp_path: Path) -> None:
    bench = load_script("release_bench")
    paths = []
    for name, evaluation in (("l1", 1.0), ("l2", 3.0), ("l3", 2.0)):
        (tmp_path / name).mkdir()
        line = {"device": "NVIDIA H200", "rl_epoch": {"evaluation_s": evaluation, "total_s": 10.0}}
        (tmp_path / name / "learning.json").write_text("a log line\n" + json.dumps(line) + "\n")
        paths.append(tmp_path / name / "learning.json")
    figures, tables = bench.rl_result(paths)
    assert figures == {"rl_eval_share_pct": 20.0, "runs": 3}
    assert tables["runs"].rows == [["l1", 1.0, 10.0, 10.0], ["l2", 3.0, 10.0, 30.0], ["l3", 2.0, 10.0, 20.0]]


def test_the_regression_result_compares_walls_agreement_and_verdicts(tmp_path: Path) -> None:
    bench = load_script("release_bench")

    def run(name: str, wall: float, speedups: list[float | None]) -> Path:
        rows = [Evaluation(f"L1-{i + 1}", "c", Status.OK if s else Status.INCORRECT, speedup=s) for i, s in enumerate(speedups)]
        return _run(tmp_path / name, rows, calls=[{"wall_s": wall, "evaluations_before": 0, "evaluations_after": len(rows)}])

    runs = [run("bc", 40.0, [1.0, 2.0, None]), run("bw", 36.0, [1.1, 2.0, None]),
            run("ac", 38.0, [1.0, 2.0, None]), run("aw", 34.0, [1.0, 2.2, 1.5])]
    figures, tables = bench.regression_result(*runs)
    assert (figures["before_cold_wall_s"], figures["after_warm_wall_s"]) == (40.0, 34.0)
    assert (figures["before_per_program_s"], figures["after_per_program_s"]) == (12.67, 12.0)
    assert (figures["before_agreement_median_pct"], figures["after_agreement_median_pct"]) == (5.0, 5.0)
    assert (figures["verdicts_same"], figures["rows"]) == (2, 3)  # L1-3 passed after, warm
    assert tables["verdict_changes"].rows == [["L1-3", "incorrect", "incorrect", "incorrect", "ok"]]
    assert [r[0] for r in tables["runs"].rows] == ["before cold", "before warm", "after cold", "after warm"]


def test_a_repeat_warm_run_gives_each_side_three_pairs_and_their_median(tmp_path: Path) -> None:
    bench = load_script("release_bench")

    def run(name: str, wall: float, speedups: list[float]) -> Path:
        rows = [Evaluation(f"L1-{i + 1}", "c", Status.OK, speedup=s) for i, s in enumerate(speedups)]
        return _run(tmp_path / name, rows, calls=[{"wall_s": wall, "evaluations_before": 0, "evaluations_after": len(rows)}])

    runs = [run("bc", 30.0, [1.0, 2.0]), run("bw", 20.0, [1.1, 2.0]), run("ac", 30.0, [1.0, 2.0]),
            run("aw", 20.0, [1.0, 2.0])]
    figures, tables = bench.regression_result(*runs, repeats=(run("bw2", 10.0, [1.0, 2.0]), run("aw2", 10.0, [1.0, 2.4])))
    assert [row[:2] for row in tables["agreement"].rows] == [
        ["before", "cold-warm"], ["before", "cold-warm2"], ["before", "warm-warm2"],
        ["after", "cold-warm"], ["after", "cold-warm2"], ["after", "warm-warm2"]]
    # before: medians 5%, 0%, 4.55% -> 4.55%; after: 0%, 10%, 10% -> 10%
    assert (figures["before_agreement_median_pct"], figures["after_agreement_median_pct"]) == (4.55, 10.0)
    assert (figures["before_per_program_s"], figures["after_per_program_s"]) == (10.0, 10.0)  # 60 s over 6
    assert figures["verdicts_same"] == 2 and tables["verdict_changes"].rows == []


def test_one_mode_a_call(tmp_path: Path) -> None:
    bench = load_script("release_bench")
    common = ["--out", str(tmp_path), "--hardware", "h", "--command", "c"]
    with pytest.raises(SystemExit):
        bench.parse_args([*common, "--rl", "a.json", "--cold", "x"])
    with pytest.raises(SystemExit):
        bench.parse_args([*common, "--cold", "x", "--warm", "y"])  # no --release
    assert bench.parse_args([*common, "--regression", "a", "b", "c", "d"]).mode == "regression"
