"""Problems: a benchmark item is a reference PyTorch program (``Model``, ``get_inputs``,
``get_init_inputs``); loaders for KernelBench JSONL/folders, the CUDA-L1 release and the starter suite."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Problem:
    """One benchmark item. ``problem_id`` is unique inside a suite, e.g. ``"L1-19"`` or ``"starter-L1-3"``."""

    problem_id: str
    level: int
    name: str
    source: str
    suite: str = "custom"

    @property
    def sha256(self) -> str:
        """Content hash of the reference source: evaluations are keyed on it, not on the id."""
        return sha256_text(self.source)


@dataclass(frozen=True)
class ReleasedKernel:
    """One row of a CUDA-L1 release file: the problem, the released candidate (if any), reported scores."""

    problem: Problem
    candidate_source: str | None
    gpu: str
    reported: dict[str, float | None] = field(default_factory=dict)


class ProblemLoadError(ValueError):
    """A problem source could not be read; the message names the file and the fix."""


# Top-level definitions only; a bare substring test would take `class ModelNew` for `class Model`.
_REFERENCE_PARTS = {
    "class Model": re.compile(r"^class\s+Model\b", re.MULTILINE),
    "def get_inputs": re.compile(r"^def\s+get_inputs\b", re.MULTILINE),
    "def get_init_inputs": re.compile(r"^def\s+get_init_inputs\b", re.MULTILINE),
}


def _check_reference(source: object, where: str) -> None:
    if not isinstance(source, str):
        raise ProblemLoadError(f"{where}: reference source is {type(source).__name__}, not Python text")
    for needed, pattern in _REFERENCE_PARTS.items():
        if not pattern.search(source):
            raise ProblemLoadError(
                f"{where}: reference source lacks `{needed}`; a problem must define class Model, "
                "get_inputs() and get_init_inputs() (KernelBench format)"
            )


def _check_declared(path: Path) -> None:
    """A file at a declared name (``kernelbench/problems.jsonl``, ``cuda-l1/<gpu>.jsonl``) must be the declared
    one, checksum and all (cudal1/data_sources.json)."""
    from cudal1.data_sources import DataFileError, check_declared

    try:
        check_declared(path)
    except DataFileError as exc:
        raise ProblemLoadError(str(exc)) from exc


def kernelbench_id(level: int, number: int) -> str:
    return f"L{level}-{number}"


def load_kernelbench_jsonl(path: str | Path, levels: Iterable[int] | None = None) -> list[Problem]:
    """Rows ``{"level", "problem_id", "name", "code"}`` as in KernelBench's published problems."""
    path = Path(path)
    if not path.is_file():
        raise ProblemLoadError(f"{path}: no such KernelBench JSONL file; point `problems.suites` at one")
    _check_declared(path)
    wanted = set(levels) if levels is not None else None
    problems = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            level, number, name, code = int(row["level"]), int(row["problem_id"]), row["name"], row["code"]
        except (ValueError, KeyError, TypeError) as exc:
            raise ProblemLoadError(f"{path}:{lineno}: not a KernelBench row ({exc!r})") from exc
        if wanted is not None and level not in wanted:
            continue
        _check_reference(code, f"{path}:{lineno}")
        problems.append(Problem(kernelbench_id(level, number), level, name, code, suite="kernelbench"))
    return problems


_KB_FILE = re.compile(r"^(\d+)_(.+)\.py$")
_LEVEL_DIR = re.compile(r"^level(\d+)$")


def _numbered_files(path: Path) -> list[tuple[int, str, Path]]:
    """``(number, name, file)`` in number order; unnumbered files follow the highest number, in name order,
    so that they can never take a number that a ``NN_Name.py`` file already has."""
    files = sorted(f for f in path.glob("*.py") if not f.name.startswith("_"))
    numbered = [(int(m.group(1)), m.group(2), f) for f in files if (m := _KB_FILE.match(f.name))]
    unnumbered = [f for f in files if not _KB_FILE.match(f.name)]
    start = max((n for n, _, _ in numbered), default=0)
    out = sorted(numbered, key=lambda t: (t[0], t[2].name))
    out += [(start + i, f.stem, f) for i, f in enumerate(unnumbered, 1)]
    seen: dict[int, Path] = {}
    for number, _, file in out:
        if number in seen:
            raise ProblemLoadError(
                f"{file}: problem number {number} is also used by {seen[number].name}; renumber one of them"
            )
        seen[number] = file
    return out


def load_problem_folder(path: str | Path, level: int | None = None, suite: str | None = None) -> list[Problem]:
    """A folder of KernelBench-format ``.py`` files (``19_ReLU.py``) or a KernelBench checkout with
    ``level1/``... sub-folders. Files without a number prefix are numbered after the numbered ones.
    The level is ``level``, else the folder's own ``levelN`` name, else 1."""
    path = Path(path)
    if not path.is_dir():
        raise ProblemLoadError(f"{path}: no such folder of problem modules")
    subdirs = sorted(
        (int(m.group(1)), p) for p in path.iterdir() if p.is_dir() and (m := _LEVEL_DIR.match(p.name))
    )
    if subdirs and level is None:
        out: list[Problem] = []
        for lvl, sub in subdirs:
            out += load_problem_folder(sub, level=lvl, suite=suite or "kernelbench")
        return out
    if level is None:
        m = _LEVEL_DIR.match(path.name)
        level = int(m.group(1)) if m else 1
    suite = suite or path.name
    problems = []
    for number, name, file in _numbered_files(path):
        source = file.read_text(encoding="utf-8")
        _check_reference(source, str(file))
        pid = kernelbench_id(level, number) if suite == "kernelbench" else f"{suite}-L{level}-{number}"
        problems.append(Problem(pid, level, name, source, suite=suite))
    if not problems:
        raise ProblemLoadError(f"{path}: holds no problem modules (*.py with class Model)")
    return problems


SCORE_FIELDS = (
    "score_default",
    "score_torch_compile_default",
    "score_torch_compile_reduce_overhead",
    "score_cuda_graph",
    "score_cudnn",
)


def load_cudal1_release(path: str | Path) -> list[ReleasedKernel]:
    """A CUDA-L1 ``optimized_cuda_code`` JSONL (one GPU). Problem ids follow KernelBench's ``L{level}-{n}``;
    the reference is the row's own ``ref_code`` (its sizes can differ from today's KernelBench)."""
    path = Path(path)
    if not path.is_file():
        raise ProblemLoadError(f"{path}: no such CUDA-L1 release file (expected e.g. ../shared/cuda-l1/h100.jsonl; "
                               "`cudal1 data fetch` gets it, docs/data.md)")
    _check_declared(path)
    gpu = path.stem
    rows = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            level, number, ref = int(row["level_id"]), int(row["task_id"]), row["ref_code"]
            reported = {k: (float(row[k]) if row.get(k) is not None else None) for k in SCORE_FIELDS}
        except (ValueError, KeyError, TypeError) as exc:
            raise ProblemLoadError(f"{path}:{lineno}: not a CUDA-L1 release row ({exc!r})") from exc
        _check_reference(ref, f"{path}:{lineno}")
        problem = Problem(kernelbench_id(level, number), level, f"cudal1-{gpu}-L{level}-{number}", ref, suite=f"cudal1-{gpu}")
        # The release marks "no code" with null, and on some rows with the *string* "None" (17 of h100's
        # 227 non-null rows): neither is a program.
        code = row.get("custom_code")
        if not isinstance(code, str) or code.strip() in ("", "None"):
            code = None
        rows.append(ReleasedKernel(problem, code, gpu, reported))
    return rows


STARTER_DIR = Path(__file__).parent / "suites" / "starter"


def load_starter_suite() -> list[Problem]:
    """The project's own offline problems, each well under a second on a 2-core CPU."""
    return load_problem_folder(STARTER_DIR, level=None, suite="starter")


def load_problems(spec: str | Path) -> list[Problem]:
    """One suite by name or path: ``starter``, a KernelBench JSONL, a CUDA-L1 release JSONL (its
    references), or a folder of KernelBench-format modules."""
    if str(spec) == "starter":
        return load_starter_suite()
    path = Path(spec)
    if path.is_dir():
        return load_problem_folder(path)
    if not path.is_file():
        raise ProblemLoadError(f"{path}: no such suite; use 'starter', a KernelBench or CUDA-L1 JSONL file, or a folder")
    with path.open(encoding="utf-8") as handle:
        first = handle.readline()
    try:
        keys = set(json.loads(first))
    except (ValueError, TypeError) as exc:
        raise ProblemLoadError(f"{path}: first line is not a JSON object ({exc})") from exc
    if "ref_code" in keys:
        return [row.problem for row in load_cudal1_release(path)]
    return load_kernelbench_jsonl(path)


def load_suites(params: Any) -> list[Problem]:
    """Every suite of a ``problems`` params section (cudal1.config.ProblemsParams), then its ``ids`` filter and
    its ``limit``; duplicate ids are an error."""
    problems: list[Problem] = []
    for suite in params.suites:
        levels = suite.levels or None
        if suite.kind == "starter":
            loaded = load_starter_suite()
            loaded = [p for p in loaded if levels is None or p.level in levels]
        elif suite.kind == "kernelbench_jsonl":
            loaded = load_kernelbench_jsonl(suite.path, levels)
        elif suite.kind == "folder":
            loaded = [p for p in load_problem_folder(suite.path) if levels is None or p.level in levels]
        else:
            loaded = [r.problem for r in load_cudal1_release(suite.path) if levels is None or r.problem.level in levels]
        problems += loaded
    seen: dict[str, Problem] = {}
    for p in problems:
        if p.problem_id in seen:
            raise ProblemLoadError(f"problem id {p.problem_id} appears in suites {seen[p.problem_id].suite!r} and "
                                   f"{p.suite!r}; keep one of them in problems.suites")
        seen[p.problem_id] = p
    if params.ids:
        unknown = sorted(set(params.ids) - set(seen))
        if unknown:
            raise ProblemLoadError(f"problems.ids: {unknown} are not in the configured suites; "
                                   f"known ids look like {sorted(seen)[:3]}")
        problems = [p for p in problems if p.problem_id in set(params.ids)]
    return problems[: params.limit] if params.limit is not None else problems
