"""The `cudal1` command line, run as a user would: a real subprocess, real files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from cudal1.candidates import Candidate, candidates_to_parquet
from cudal1.problems import load_starter_suite

FAST = ["--trials", "3", "--correctness-trials", "2"]


def cudal1(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cudal1.cli", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=600)


def diag_problem():
    return next(p for p in load_starter_suite() if p.name == "Diag_matmul")


FAST_DIAG = """import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()

    def forward(self, a, B):
        return a.unsqueeze(1) * B
"""


@pytest.mark.slow
def test_evaluate_one_json_last_line(tmp_path: Path) -> None:
    (tmp_path / "ref.py").write_text(diag_problem().source)
    (tmp_path / "good.py").write_text(FAST_DIAG)
    (tmp_path / "wrong.py").write_text(FAST_DIAG.replace("a.unsqueeze(1) * B", "B * 2.0"))
    good = cudal1("evaluate-one", "--reference", "ref.py", "--candidate", "good.py", *FAST, "--json", cwd=tmp_path)
    assert good.returncode == 0, good.stderr
    result = json.loads(good.stdout.strip().splitlines()[-1])
    assert result["status"] == "ok" and result["speedup"] > 2.0, result  # O(n) instead of an O(n^2) diag
    assert result["reference_ms"] > result["candidate_ms"] > 0
    wrong = cudal1("evaluate-one", "--reference", "ref.py", "--candidate", "wrong.py", *FAST, "--json", cwd=tmp_path)
    assert wrong.returncode == 0  # a verdict, not a usage error
    verdict = json.loads(wrong.stdout.strip().splitlines()[-1])
    assert verdict["status"] == "incorrect" and verdict["speedup"] is None and "outside atol" in verdict["reason"]


def test_evaluate_one_bad_arguments(tmp_path: Path) -> None:
    (tmp_path / "ref.py").write_text(diag_problem().source)
    missing = cudal1("evaluate-one", "--reference", "ref.py", "--candidate", "nope.py", "--json", cwd=tmp_path)
    assert missing.returncode == 2 and "nope.py" in missing.stderr
    (tmp_path / "good.py").write_text(FAST_DIAG)
    bad_device = cudal1("evaluate-one", "--reference", "ref.py", "--candidate", "good.py", "--device", "tpu",
                        cwd=tmp_path)
    assert bad_device.returncode == 2 and "cpu" in bad_device.stderr


@pytest.mark.slow
def test_evaluate_batch_is_resumable(tmp_path: Path) -> None:
    problem = diag_problem()
    candidates = [Candidate(problem.problem_id, FAST_DIAG, origin="test:fast"),
                  Candidate(problem.problem_id, FAST_DIAG + "\n# same program, another hash\n", origin="test:copy")]
    candidates_to_parquet(candidates, tmp_path / "cands.parquet")
    args = ["evaluate", "--problems", "starter", "--candidates", "cands.parquet", "--out", "res.parquet", *FAST]
    first = cudal1(*args, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    table = pl.read_parquet(tmp_path / "res.parquet")
    assert table.height == 2 and set(table["status"]) == {"ok"}, table.select("status", "reason").rows()
    again = cudal1(*args, cwd=tmp_path)
    assert again.returncode == 0 and "0 new evaluations" in again.stderr
    assert pl.read_parquet(tmp_path / "res.parquet").height == 2
    unknown = candidates_to_parquet([Candidate("no-such-problem", FAST_DIAG)], tmp_path / "bad.parquet")
    assert unknown is None
    bad = cudal1("evaluate", "--problems", "starter", "--candidates", "bad.parquet", "--out", "x.parquet", cwd=tmp_path)
    assert bad.returncode == 2 and "no-such-problem" in bad.stderr
