"""Fixtures for the evaluator tests: folders the sandboxed workers can reach. When the tests run as root
each worker runs as a fresh uid, which cannot enter pytest's tmp_path (it sits under a 0700 folder).

Also the run's shared servers (tests/servers.py): the run folder is opened here by the controlling
process before any xdist worker starts, and closed when the whole run ends; the Prefect server in it
is started on first use, once for all workers, and serves the flow and learning tests alike."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import servers

_RUN_DIR = pytest.StashKey[Path]()


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the controller (or the only process): xdist workers inherit
        config.stash[_RUN_DIR] = servers.open_run_dir()


def pytest_unconfigure(config: pytest.Config) -> None:
    if _RUN_DIR in config.stash:
        servers.close_run_dir(config.stash[_RUN_DIR])


# Fixtures that build something expensive once and hand it to several tests, which then run in file order
# on its state: each xdist worker would build its own copy, and the order would be lost. With
# `--dist loadgroup` every test using one of them goes to the same worker. A module-scoped fixture is
# grouped per module (each module builds its own).
SHARED_SESSION_FIXTURES = ("pipeline_repo", "tiny_server")
SHARED_MODULE_FIXTURES = ("xg_repo", "tiny_project")


@pytest.hookimpl(tryfirst=True)  # before xdist reads the xdist_group marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        for name in used.intersection(SHARED_SESSION_FIXTURES):
            item.add_marker(pytest.mark.xdist_group(name))
        for name in used.intersection(SHARED_MODULE_FIXTURES):
            item.add_marker(pytest.mark.xdist_group(f"{name}:{item.module.__name__}"))


@pytest.fixture(scope="session")
def prefect_home() -> Path:
    """The PREFECT_HOME of the shared server and of every client command the tests run."""
    return servers.prefect_home()


@pytest.fixture(scope="session")
def prefect_server() -> str:
    """The API URL of the run's real local Prefect server (one for all xdist workers)."""
    return servers.prefect_server_url()


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
