"""A `dvc repro` stopped while writing DVC's rwlock leaves it empty, and every later `dvc repro` fails
until the file is deleted by hand (treeverse/dvc#7615). The pipeline flow clears such a file before it
runs DVC, and leaves a readable one alone. Real DVC on a one-stage repository."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from flows.pipeline import clear_corrupt_rwlock


def _dvc(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dvc", *args], cwd=repo, capture_output=True, text=True,
                          env={"DVC_NO_ANALYTICS": "1", "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin"})


def test_an_empty_rwlock_left_by_a_stopped_repro_is_cleared_and_repro_runs_again(tmp_path: Path) -> None:
    assert _dvc(tmp_path, "init", "--no-scm").returncode == 0
    assert _dvc(tmp_path, "stage", "add", "-n", "hello", "-o", "out.txt", "echo hi > out.txt").returncode == 0
    lock = tmp_path / ".dvc" / "tmp" / "rwlock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text("")  # what an interrupted write leaves
    stuck = _dvc(tmp_path, "repro")
    assert stuck.returncode != 0 and "rwlock" in (stuck.stdout + stuck.stderr).lower()
    assert clear_corrupt_rwlock(tmp_path, settle_s=0.01) and not lock.exists()
    ran = _dvc(tmp_path, "repro")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert (tmp_path / "out.txt").read_text().strip() == "hi"


def test_a_readable_rwlock_or_none_is_left_alone(tmp_path: Path) -> None:
    assert not clear_corrupt_rwlock(tmp_path)  # no DVC here at all
    lock = tmp_path / ".dvc" / "tmp" / "rwlock"
    lock.parent.mkdir(parents=True)
    lock.write_text('{"read": {}, "write": {}}')
    assert not clear_corrupt_rwlock(tmp_path) and lock.exists()
