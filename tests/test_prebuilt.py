"""A program prebuilt by an earlier batch into the same build cache is not prebuilt again: a warm run
starts no build worker for it (CPU, real g++ and real workers)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from ext_helpers import FAST, fallback_program, fixture_problem

from cudal1.candidates import Candidate, Status
from cudal1.evaluator.batch import evaluate_many
from cudal1.evaluator.builds import prebuilt
from cudal1.problems import Problem

# Its build fails at once and it falls back to PyTorch: a build that leaves its mark in the cache quickly.
SOURCE = fallback_program("cudal1_prebuilt_twice", "this is not C++")


def _prebuild_s(problem: Problem, candidate: Candidate, ext_root: Path) -> float:
    [result] = evaluate_many([problem], [candidate], FAST, devices=["cpu"], extensions_root=ext_root, build_workers=1)
    assert result.status is Status.OK, result.reason
    return result.extra["prebuild_s"]


@pytest.mark.slow  # three batches, 45 s on the CPU machine
def test_a_second_batch_skips_the_prebuild_of_the_same_program_for_the_same_problem(ext_root: Path) -> None:
    scale, relu = fixture_problem("scale_shift"), fixture_problem("relu")
    candidate = Candidate(scale.problem_id, SOURCE, origin="test")
    assert not prebuilt(scale, candidate, FAST, ext_root)
    assert _prebuild_s(scale, candidate, ext_root) > 0
    assert prebuilt(scale, candidate, FAST, ext_root)
    marks = ext_root / ".prebuilt"
    assert (marks.stat().st_mode & 0o777) == 0o700  # the parent's alone: no worker can mark a program built
    assert _prebuild_s(scale, candidate, ext_root) == 0.0  # warm: no build worker
    # The same source for another problem: its warm-up would run other shapes, so it is prebuilt
    assert not prebuilt(relu, Candidate(relu.problem_id, SOURCE), FAST, ext_root)
    # The program's folder gone from the cache: the mark alone is not trusted
    shutil.rmtree(ext_root / candidate.sha256[:16])
    assert not prebuilt(scale, candidate, FAST, ext_root)
    assert _prebuild_s(scale, candidate, ext_root) > 0
