"""Fixtures for the evaluator tests: folders the sandboxed workers can reach. When the tests run as root
each worker runs as a fresh uid, which cannot enter pytest's tmp_path (it sits under a 0700 folder).

Also what an xdist run shares: the run folder (tests/servers.py), opened here by the controlling process
before any worker starts and closed when the whole run ends, with the Prefect server that all workers'
flow and learning tests use; and the groups of tests that must share a worker (tests/scheduling.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import scheduling, servers

_RUN_DIR = pytest.StashKey[Path]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "torch_header: ext_root holds the run's precompiled torch header")
    if not hasattr(config, "workerinput"):  # the controller (or the only process): xdist workers inherit
        config.stash[_RUN_DIR] = servers.open_run_dir()
        workers = getattr(config.option, "numprocesses", None) or 0
        if isinstance(workers, int) and workers > 1:
            # Each worker's torch (and the flows it starts) would take every core for its OpenMP pool: with
            # more threads than cores, spinning OpenMP threads slowed TRL training tenfold. The evaluator
            # sets its own workers' threads from the protocol, whatever is set here.
            threads = str(max(1, (os.cpu_count() or 1) // workers))
            for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
                os.environ.setdefault(name, threads)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _RUN_DIR in config.stash:
        servers.close_run_dir(config.stash[_RUN_DIR])


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    scheduling.record_groups(items)


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist, which the GPU machine does not install
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    return scheduling.make_scheduler(config, log)


@pytest.fixture(scope="session")
def prefect_home() -> Path:
    """The PREFECT_HOME of the shared server and of every client command the tests run."""
    return servers.prefect_home()


@pytest.fixture(scope="session")
def prefect_server() -> str:
    """The API URL of the run's real local Prefect server (one for all xdist workers)."""
    return servers.prefect_server_url()


@pytest.fixture
def ext_root(request: pytest.FixtureRequest) -> Iterator[Path]:
    """A build cache the workers can traverse (0711). In a test marked ``torch_header`` it holds the run's
    precompiled torch header (servers.header_root), as a GPU batch's parent leaves it, so that its builds
    skip parsing torch's headers (about 20 s each) and run as on a GPU host: for tests of what a build does,
    not of the header (tests/test_pch.py)."""
    for root in servers.reachable("cudal1-test-ext-"):
        yield servers.link_header(root) if request.node.get_closest_marker("torch_header") else root


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A folder every worker may write to (0777), for programs that keep state across loads."""
    yield from servers.reachable("cudal1-test-shared-", 0o777)

