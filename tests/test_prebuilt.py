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
from cudal1.evaluator.workers import extensions_folder
from cudal1.problems import Problem

pytestmark = pytest.mark.torch_header  # builds here skip parsing torch's headers (tests/conftest.py)

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
    shutil.rmtree(extensions_folder(ext_root, candidate))
    assert not prebuilt(scale, candidate, FAST, ext_root)
    assert _prebuild_s(scale, candidate, ext_root) > 0


def _path_record(path: bytes, index: int) -> bytes:
    padded = path + b"\0" * (-len(path) % 4)
    return (len(padded) + 4).to_bytes(4, "little") + padded + (~index & 0xFFFFFFFF).to_bytes(4, "little")


def test_a_build_whose_ninja_deps_log_is_damaged_is_not_taken_as_prebuilt(tmp_path: Path) -> None:
    """Its timed load would compile again (55-72 s a load for L1-88 and L1-97 on an H200), so the prebuild
    runs and mends it off the timed path, whatever the mark says."""
    from cudal1.evaluator.builds import _mark_prebuilt

    scale = fixture_problem("scale_shift")
    candidate = Candidate(scale.problem_id, SOURCE, origin="test")
    build = extensions_folder(tmp_path, candidate) / "cudal1_prebuilt_twice"
    build.mkdir(parents=True)
    (build / "build.ninja").write_text("rule compile\n  command = true\n")
    records = _path_record(b"main.o", 0) + _path_record(b"main.cpp", 1)
    deps = (16 | 1 << 31).to_bytes(4, "little") + bytes(12) + (1).to_bytes(4, "little")
    (build / ".ninja_deps").write_bytes(b"# ninjadeps\n" + (4).to_bytes(4, "little") + records + deps)
    _mark_prebuilt(scale, candidate, FAST, tmp_path)
    assert prebuilt(scale, candidate, FAST, tmp_path)
    with (build / ".ninja_deps").open("ab") as log:
        log.write(records)  # a second ninja's records, numbered from 0 again
    assert not prebuilt(scale, candidate, FAST, tmp_path)


def test_the_parent_reads_a_candidates_deps_log_without_following_a_link_or_waiting_on_a_pipe(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The build folder is the candidate's and the parent reads it as root: a log that is a link (to a file
    of the parent's), a pipe (a read would block the parent for good) or larger than any real log is not
    read as a log."""
    import os

    from cudal1.evaluator import toolchain

    build = tmp_path / "ext" / "m"
    build.mkdir(parents=True)
    (build / "build.ninja").write_text("")
    secret = tmp_path / "parents-own"
    secret.write_bytes(b"not a ninja log")
    (build / ".ninja_deps").symlink_to(secret)
    assert toolchain.damaged(build) == "" and toolchain.heal(build) == "" and (build / ".ninja_deps").is_symlink()
    (build / ".ninja_deps").unlink()
    os.mkfifo(build / ".ninja_deps")
    assert toolchain.damaged(build) == ""  # returns at once: nothing writes to that pipe
    (build / ".ninja_deps").unlink()
    (build / ".ninja_deps").write_bytes(b"# ninjadeps\n" + (4).to_bytes(4, "little") + bytes(64))
    monkeypatch.setattr(toolchain, "MAX_LOG", 32)
    assert toolchain.damaged_builds(tmp_path / "ext") == ["m: larger than 32 bytes"]
    assert toolchain.heal(build) == "larger than 32 bytes" and not (build / ".ninja_deps").exists()
