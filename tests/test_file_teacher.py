"""The file teacher: programs read from a CUDA-L1 release or a table become candidates of the run's problems;
the evaluator measures each, and only the verified ones enter the corpus, with their speedup, their origin
and their author's analysis."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from cudal1.config import ParamsError, load_params
from cudal1.evaluator.config import EvalConfig
from cudal1.generation.augment import corpus_rows
from cudal1.generation.files import ProgramFileError, file_candidates, read_programs
from cudal1.problems import load_starter_suite
from cudal1.training.evaluation import evaluator_fn

SHARED_RELEASE = Path(__file__).resolve().parents[2] / "shared" / "cuda-l1" / "h100.jsonl"
# The starter problems that mirror KernelBench's (configs/cpu-cudal1-release.yaml maps the same ids)
STARTER_IDS = {"L1-1": "starter-L1-1", "L1-12": "starter-L1-8", "L1-19": "starter-L1-2", "L1-23": "starter-L1-4",
               "L1-26": "starter-L1-3", "L1-40": "starter-L1-6", "L1-47": "starter-L1-5", "L2-56": "starter-L2-3"}

FAST_DIAG = """import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return B * A.unsqueeze(1)  # diag(A) @ B without the N x N matrix
"""
WRONG_RELU = """import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return x.abs()
"""


def _release(path: Path, rows: list[tuple[int, int, str | None]]) -> Path:
    """A file in the CUDA-L1 release's format; its references are the starter problems' sources."""
    by_name = {p.name: p for p in load_starter_suite()}
    ref = by_name["Diag_matmul"].source
    path.write_text("".join(json.dumps({"level_id": level, "task_id": task, "ref_code": ref, "custom_code": code,
                                        "score_default": 2.0}) + "\n" for level, task, code in rows))
    return path


def test_a_release_file_gives_its_programs_under_kernelbench_ids(tmp_path: Path) -> None:
    path = _release(tmp_path / "h100.jsonl", [(1, 12, FAST_DIAG), (1, 13, None), (1, 14, "None")])
    assert [(p.problem_id, p.program, p.analysis) for p in read_programs(path)] == [("L1-12", FAST_DIAG, "")]


def test_a_table_gives_programs_with_their_analysis(tmp_path: Path) -> None:
    rows = [{"problem_id": "starter-L1-8", "source": FAST_DIAG, "analysis": "diag(A) is never built"},
            {"problem_id": "starter-L1-2", "source": WRONG_RELU, "analysis": None}]
    pl.DataFrame(rows).write_parquet(tmp_path / "corpus.parquet")
    programs = read_programs(tmp_path / "corpus.parquet")
    assert [(p.problem_id, p.analysis) for p in programs] == [("starter-L1-8", "diag(A) is never built"),
                                                              ("starter-L1-2", "")]
    (tmp_path / "bad.jsonl").write_text(json.dumps({"problem_id": "x", "code": FAST_DIAG}) + "\n")
    with pytest.raises(ProgramFileError, match=r"row 1 lacks a problem_id or a program .* it has \['code', "):
        read_programs(tmp_path / "bad.jsonl")
    with pytest.raises(ProgramFileError, match="no such file of programs"):
        read_programs(tmp_path / "missing.jsonl")


def test_only_verified_programs_enter_the_corpus_with_speedup_origin_and_analysis(tmp_path: Path) -> None:
    problems = [p for p in load_starter_suite() if p.problem_id in ("starter-L1-2", "starter-L1-8")]
    table = tmp_path / "programs.jsonl"
    table.write_text(json.dumps({"problem_id": "L1-12", "program": FAST_DIAG, "analysis": "no N x N matrix"}) + "\n"
                     + json.dumps({"problem_id": "L1-19", "program": WRONG_RELU}) + "\n"
                     + json.dumps({"problem_id": "L3-1", "program": FAST_DIAG}) + "\n")
    candidates, unmatched = file_candidates(problems, read_programs(table), "teacher:file",
                                            {"L1-12": "starter-L1-8", "L1-19": "starter-L1-2"})
    assert unmatched == ["L3-1"] and {c.origin for c in candidates} == {"teacher:file"}
    protocol = EvalConfig(correctness_trials=2, timing_trials=3, target_trial_ms=10.0, warmup_iters=1, remeasure=0)
    with evaluator_fn(protocol) as evaluate:  # the evaluator every candidate goes through
        evaluations = evaluate(problems, candidates)
    assert {e.problem_id: e.status.value for e in evaluations} == {"starter-L1-8": "ok", "starter-L1-2": "incorrect"}
    (row,) = corpus_rows(problems, candidates, evaluations)
    assert (row["problem_id"], row["origin"], row["analysis"]) == ("starter-L1-8", "teacher:file", "no N x N matrix")
    assert row["speedup"] > 2.0  # O(N*M) instead of an N x N matrix and a matmul


def test_file_teacher_params_check_the_file_and_the_names(tmp_path: Path) -> None:
    (tmp_path / "p.jsonl").write_text("")
    (tmp_path / "params.yaml").write_text("augment:\n  file_teachers:\n    - {name: release, path: p.jsonl, "
                                          "ids: {L1-12: starter-L1-8}}\n")
    (teacher,) = load_params(tmp_path / "params.yaml", "augment").file_teachers
    assert teacher.path == str(tmp_path / "p.jsonl") and teacher.ids == {"L1-12": "starter-L1-8"}
    (tmp_path / "params.yaml").write_text("augment:\n  file_teachers:\n    - {name: release, path: nope.jsonl}\n")
    with pytest.raises(ParamsError, match=r"augment.file_teachers\[0\].path: .*nope.jsonl does not exist"):
        load_params(tmp_path / "params.yaml", "augment")
    (tmp_path / "params.yaml").write_text(
        "augment:\n  teachers:\n    - {name: release, base_url: 'http://x:1/v1', model: m}\n"
        "  file_teachers:\n    - {name: release, path: p.jsonl}\n")
    with pytest.raises(ParamsError, match="teacher names must be unique"):
        load_params(tmp_path / "params.yaml", "augment")


@pytest.mark.slow
@pytest.mark.skipif(not SHARED_RELEASE.is_file(), reason="the CUDA-L1 release is not under ../shared")
def test_the_release_runs_on_the_starter_problems_it_matches() -> None:
    """Why the CPU overlay can turn the release on: its programs for the starter's KernelBench twins load and
    run here at the starter's sizes, and the diagonal shortcut verifies."""
    problems = load_starter_suite()
    candidates, _ = file_candidates(problems, read_programs(SHARED_RELEASE), "teacher:cudal1-h100", STARTER_IDS)
    assert len(candidates) == len(STARTER_IDS)
    diag = [c for c in candidates if c.problem_id == "starter-L1-8"]
    protocol = EvalConfig(correctness_trials=2, timing_trials=3, target_trial_ms=10.0, warmup_iters=1, remeasure=0)
    with evaluator_fn(protocol) as evaluate:
        (measured,) = evaluate(problems, diag)
    assert measured.ok and measured.speedup > 2.0, measured.reason
