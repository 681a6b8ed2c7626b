"""The file teacher: programs read from a file, proposed as if a teacher had written them (CUDA-L1 stage 1
with the paper's own released programs, or any earlier run's). Nothing is trusted: each program becomes a
candidate of its problem, the evaluator measures it like any other, and only the verified ones enter the
corpus.

Two kinds of file, told apart by their columns:

- a CUDA-L1 release (``.jsonl`` rows with ``level_id``, ``task_id``, ``custom_code``): ids ``L{level}-{task}``
  as KernelBench's; rows without code are skipped;
- a table (``.jsonl`` or ``.parquet``) with ``problem_id`` and ``program`` (or ``source``, as in this
  project's candidate and corpus tables), and optionally ``analysis``: the author's Performance Analysis,
  which the SFT targets then carry.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cudal1.candidates import Candidate
from cudal1.problems import Problem, ProblemLoadError, load_cudal1_release

if TYPE_CHECKING:
    from cudal1.config import FileTeacherParams


class ProgramFileError(ValueError):
    """A teacher's file cannot be read; the message names the file and the fix."""


@dataclass(frozen=True)
class FileProgram:
    """One program of the file, under the file's own problem id."""

    problem_id: str
    program: str
    analysis: str = ""


def _rows(path: Path) -> list[dict]:
    if path.suffix == ".parquet":
        import polars as pl

        return pl.read_parquet(path).to_dicts()
    rows = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except ValueError as exc:
                raise ProgramFileError(f"{path}:{lineno}: not a JSON object ({exc})") from exc
    return rows


def read_programs(path: str | Path) -> list[FileProgram]:
    """Every program of the file at ``path``, in file order.

    >>> import tempfile
    >>> table = Path(tempfile.mkdtemp()) / "programs.jsonl"
    >>> _ = table.write_text('{"problem_id": "L1-1", "program": "class ModelNew: ...", "analysis": "fewer passes"}\\n')
    >>> read_programs(table)
    [FileProgram(problem_id='L1-1', program='class ModelNew: ...', analysis='fewer passes')]
    """
    path = Path(path)
    if not path.is_file():
        raise ProgramFileError(f"{path}: no such file of programs; point the file teacher's `path` at a CUDA-L1 "
                               "release .jsonl, or a .jsonl/.parquet with problem_id and program columns")
    rows = _rows(path)
    if rows and "custom_code" in rows[0]:
        try:
            released = load_cudal1_release(path)
        except ProblemLoadError as exc:
            raise ProgramFileError(str(exc)) from exc
        return [FileProgram(r.problem.problem_id, r.candidate_source) for r in released if r.candidate_source]
    programs = []
    for i, row in enumerate(rows, 1):
        program = row.get("program", row.get("source"))
        if not isinstance(row.get("problem_id"), str) or not isinstance(program, str):
            raise ProgramFileError(f"{path}: row {i} lacks a problem_id or a program (text columns `problem_id` and "
                                   f"`program` or `source`); it has {sorted(row)}")
        programs.append(FileProgram(row["problem_id"], program, row.get("analysis") or ""))
    return programs


def file_candidates(problems: Sequence[Problem], programs: Sequence[FileProgram], origin: str,
                    ids: Mapping[str, str] | None = None) -> tuple[list[Candidate], list[str]]:
    """The candidates of the programs whose problem is among ``problems`` (a file id is first mapped through
    ``ids``), and the file ids that matched none, for the log.

    >>> p = Problem("starter-L1-8", 1, "Diag_matmul", "class Model: ...")
    >>> found, unmatched = file_candidates([p], [FileProgram("L1-12", "class ModelNew: ..."),
    ...                                         FileProgram("L1-13", "class ModelNew: ...")],
    ...                                    "teacher:release", {"L1-12": "starter-L1-8"})
    >>> [(c.problem_id, c.origin) for c in found], unmatched
    ([('starter-L1-8', 'teacher:release')], ['L1-13'])
    """
    known = {p.problem_id for p in problems}
    mapping = dict(ids or {})
    candidates, unmatched = [], []
    for program in programs:
        pid = mapping.get(program.problem_id, program.problem_id)
        if pid in known:
            candidates.append(Candidate(pid, program.program, origin, analysis=program.analysis))
        else:
            unmatched.append(program.problem_id)
    return candidates, unmatched


def teacher_candidates(problems: Sequence[Problem], teacher: FileTeacherParams) -> tuple[list[Candidate], list[str], int]:
    """A file teacher's programs (an ``augment.file_teachers`` entry) as candidates of ``problems``, origin
    ``teacher:<name>``; also the file ids that matched none and how many programs the file held, for the log."""
    programs = read_programs(teacher.path)
    candidates, unmatched = file_candidates(problems, programs, f"teacher:{teacher.name}", teacher.ids)
    return candidates, unmatched, len(programs)
