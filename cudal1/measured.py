"""Measured figures as committed results files, so that a figure lives in one place.

Every measurement the docs quote has a folder under ``results/`` holding ``result.json``: what was
measured (``title``), when (``date``), on which tree (``commit``), by which command (``command``), on what
(``hardware``), and the figures themselves (``figures``: name -> number or text; ``tables``: name ->
columns and rows). The script that measured writes it with :func:`write_result`; the docs quote it through
generated spans (``docs/generate.py``), never by copying a number by hand.

>>> import tempfile
>>> folder = Path(tempfile.mkdtemp()) / "example"
>>> path = write_result(folder, title="An example", command="python x.py", hardware="2-core CPU",
...                     figures={"wall_s": 12.5}, date="2026-12-06", commit="abc1234")
>>> result = read_result(folder)
>>> result.name, result.figures["wall_s"], result.figure("wall_s")
('example', 12.5, 12.5)
>>> result.figure("missing")
Traceback (most recent call last):
...
KeyError: "results/example has no figure 'missing' (it has: wall_s)"
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import re
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

RESULT_FILE = "result.json"
REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS_ROOT = REPO_ROOT / "results"

Figure = float | int | str | None


@dataclass(frozen=True)
class Table:
    """A table of a result: column names and rows of cells (numbers or text)."""

    columns: list[str]
    rows: list[list[Figure]]

    def __post_init__(self) -> None:
        for row in self.rows:
            if len(row) != len(self.columns):
                raise ValueError(f"a row has {len(row)} cells for {len(self.columns)} columns: {row}")


@dataclass(frozen=True)
class Result:
    """One measurement: its provenance and its figures."""

    name: str
    title: str
    date: str
    commit: str
    command: str
    hardware: str
    figures: dict[str, Figure]
    tables: dict[str, Table] = field(default_factory=dict)
    notes: str = ""

    def figure(self, key: str) -> Figure:
        if key not in self.figures:
            raise KeyError(f"results/{self.name} has no figure {key!r} (it has: {', '.join(sorted(self.figures))})")
        return self.figures[key]

    def table(self, key: str) -> Table:
        if key not in self.tables:
            raise KeyError(f"results/{self.name} has no table {key!r} (it has: {', '.join(sorted(self.tables))})")
        return self.tables[key]


def git_commit(root: Path = REPO_ROOT) -> str:
    """The checked-out commit (short), with ``+dirty`` when tracked files differ from it; ``unknown``
    outside a git checkout (the GPU machine gets a copy of the tree: pass its commit explicitly there)."""
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{sha}+dirty" if dirty else sha


def this_machine() -> str:
    """The CPU model and core count of this machine, e.g. ``2-core AMD EPYC 7B13``."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()}-core {model}"


_COUNT = re.compile(r"(\d+) (passed|failed|skipped|deselected|xfailed|xpassed|errors?|warnings?)\b")
_SECONDS = re.compile(r"\bin ([0-9.]+)s\b")


def pytest_summary(output: str) -> dict[str, float | int]:
    """The counts and seconds of pytest's last summary line in ``output`` (a run's log): ``passed``,
    ``failed``, ``skipped``, ``errors``... (0 where pytest names none) and ``seconds`` (pytest's own time).

    >>> pytest_summary("...\\n== 3 failed, 907 passed, 2 skipped, 40 deselected in 795.12s (0:13:15) ==\\n")
    {'passed': 907, 'failed': 3, 'skipped': 2, 'errors': 0, 'deselected': 40, 'seconds': 795.12}
    >>> pytest_summary("123 passed in 219.70s (0:03:39)")["passed"]
    123
    >>> pytest_summary("no summary here")
    Traceback (most recent call last):
    ...
    ValueError: no pytest summary line ('N passed ... in S s') in the output
    """
    for line in reversed(output.splitlines()):
        counts, seconds = _COUNT.findall(line), _SECONDS.search(line)
        if counts and seconds:
            found = {("errors" if kind.startswith("error") else kind): int(n) for n, kind in counts}
            return {k: found.get(k, 0) for k in ("passed", "failed", "skipped", "errors", "deselected")} | \
                {"seconds": float(seconds.group(1))}
    raise ValueError("no pytest summary line ('N passed ... in S s') in the output")

def write_result(folder: Path, *, title: str, command: str, hardware: str, figures: dict[str, Figure],
                 tables: dict[str, Table] | None = None, notes: str = "", date: str | None = None,
                 commit: str | None = None) -> Path:
    """Write ``folder/result.json`` (the folder's name is the result's name); returns its path. ``date``
    defaults to today (UTC), ``commit`` to :func:`git_commit`."""
    folder.mkdir(parents=True, exist_ok=True)
    result = Result(name=folder.name, title=title, date=date or _dt.datetime.now(_dt.timezone.utc).date().isoformat(),
                    commit=commit or git_commit(), command=command, hardware=hardware, figures=dict(figures),
                    tables=dict(tables or {}), notes=notes)
    path = folder / RESULT_FILE
    path.write_text(json.dumps(asdict(result), indent=1, sort_keys=False) + "\n")
    return path


def read_result(where: Path | str) -> Result:
    """The result in ``where`` (a folder, its result.json, or a name under ``results/``)."""
    path = Path(where)
    if not path.exists() and not path.is_absolute() and len(path.parts) == 1:
        path = RESULTS_ROOT / path
    if path.is_dir():
        path = path / RESULT_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no results file; measure it with the script named in docs, or fix the name")
    data: dict[str, Any] = json.loads(path.read_text())
    tables = {k: Table(**v) for k, v in data.pop("tables", {}).items()}
    return Result(**data, tables=tables)
