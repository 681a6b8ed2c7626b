"""Fixtures for the evaluator tests: folders the sandboxed workers can reach. When the tests run as root
each worker runs as a fresh uid, which cannot enter pytest's tmp_path (it sits under a 0700 folder)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


def _reachable(prefix: str, mode: int) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(mode)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def ext_root() -> Iterator[Path]:
    """A build cache the workers can traverse (0711)."""
    yield from _reachable("cudal1-test-ext-", 0o711)


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A folder every worker may write to (0777), for programs that keep state across loads."""
    yield from _reachable("cudal1-test-shared-", 0o777)
