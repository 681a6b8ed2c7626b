"""Servers shared by every process of one test run (pytest-xdist workers included): one real Prefect
server, started by the first process that asks for it and stopped when the run ends.

How the processes find each other: the controlling pytest process (the only one without xdist) makes a
run folder in ``pytest_configure`` and exports its path in ``CUDAL1_TEST_RUN_DIR``; xdist workers are
started after that and inherit it. A worker that needs the server takes a file lock in that folder,
starts the server if no one has, and writes its URL and pid there; the others read them. The controller
stops the server by that pid in ``pytest_unconfigure``, after every worker has finished.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from filelock import FileLock

RUN_DIR_ENV = "CUDAL1_TEST_RUN_DIR"
VENV_BIN = Path(sys.executable).parent

# One SQLite file behind one server, written to by every worker's flows at once: a statement may wait for
# the write lock far longer than Prefect's 10 s default on a loaded 2-core machine.
PREFECT_SERVER_ENV = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    # The server's loops that no test relies on, each waking every 5-60 s (together ~2% of a core idle, more
    # while flows run): no schedule is meant to create runs (tests start deployments with `deployment run`),
    # no run is late, paused, cancelled or orphaned on purpose, and no automation reacts to events. No test
    # reads task runs, events or logs back from the API either: the recorders of those are off, as is the UI
    # (tests/flows/conftest.py's run_env keeps the flows from sending logs): about a sixth of its CPU.
    **{f"PREFECT_SERVER_SERVICES_{name}_ENABLED": "false" for name in (
        "SCHEDULER", "LATE_RUNS", "PAUSE_EXPIRATIONS", "FOREMAN", "REPOSSESSOR", "CANCELLATION_CLEANUP", "TRIGGERS",
        "EVENT_PERSISTER", "TASK_RUN_RECORDER", "DB_VACUUM", "CLEANUP_RECONCILER", "EVENT_LOGGER")},
    "PREFECT_UI_ENABLED": "false",
    "PREFECT_SERVER_DATABASE_TIMEOUT": "60",
    "PREFECT_SERVER_DATABASE_CONNECTION_TIMEOUT": "60",
}

_started: list[subprocess.Popen] = []  # servers this process started (kept so they are not garbage)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, timeout_s: float, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process for {url} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"{url} did not answer within {timeout_s:.0f} s")


def stop(proc: subprocess.Popen, signals: tuple[int, ...] = (signal.SIGTERM,)) -> None:
    """Stop a process these tests started (by its id), escalating to SIGKILL."""
    for sig in signals:
        if proc.poll() is None:
            proc.send_signal(sig)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                continue
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=10)


def open_run_dir() -> Path:
    """Called once, by the controlling process: the folder every process of this run shares."""
    path = Path(tempfile.mkdtemp(prefix="cudal1-test-run-"))
    os.environ[RUN_DIR_ENV] = str(path)
    return path


def run_dir() -> Path:
    path = os.environ.get(RUN_DIR_ENV)
    if not path:  # imported outside a pytest run that went through tests/conftest.py
        path = str(open_run_dir())
    return Path(path)


def prefect_home() -> Path:
    home = run_dir() / "prefect-home"
    home.mkdir(exist_ok=True)
    return home


def prefect_server_url() -> str:
    """The run's Prefect server (``.../api``), started here if no process of this run has started it."""
    folder = run_dir()
    url_file = folder / "prefect.url"
    with FileLock(str(folder / "prefect.lock")):
        if url_file.exists():
            url = url_file.read_text()
            wait_http(f"{url}/health", 120)  # it answered once; a dead server must fail loudly here
            return url
        port = free_port()
        env = os.environ | PREFECT_SERVER_ENV | {"PREFECT_HOME": str(prefect_home())}
        env.pop("PREFECT_API_URL", None)
        log = (folder / "prefect-server.log").open("w")
        proc = subprocess.Popen([str(VENV_BIN / "prefect"), "server", "start", "--host", "127.0.0.1",
                                 "--port", str(port)], env=env, stdout=log, stderr=subprocess.STDOUT)
        log.close()  # the child holds its own copy
        _started.append(proc)
        (folder / "prefect.pid").write_text(str(proc.pid))
        url = f"http://127.0.0.1:{port}/api"
        wait_http(f"{url}/health", 120, proc)
        url_file.write_text(url)
        return url


def header_root() -> Path:
    """An extensions root holding the precompiled torch header, compiled once for the whole run (about 40 s
    of g++) by the first process that asks, as a batch compiles it (cudal1.evaluator.builds.prebuild_header):
    what that compile said is kept in its ``prepared`` file (tests/test_pch.py reads it)."""
    from cudal1.evaluator import EvalConfig
    from cudal1.evaluator.builds import prebuild_header

    folder = run_dir() / "ext-header"
    with FileLock(str(run_dir() / "ext-header.lock")):
        done = folder / "prepared"
        if not done.exists():
            folder.mkdir(exist_ok=True)
            folder.chmod(0o711)  # sandboxed workers traverse it
            message, _wall = prebuild_header(folder, EvalConfig())
            done.write_text(message)
    return folder


def reachable(prefix: str, mode: int = 0o711, parent: Path | None = None) -> Iterator[Path]:
    """A fresh temporary folder with ``mode`` (0711: a sandboxed worker's uid may traverse it, as the
    evaluator makes its own), removed afterwards: the body of a fixture (``yield from``)."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    path.chmod(mode)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def link_header(root: Path) -> Path:
    """Link the run's precompiled torch header (header_root) into the extensions root ``root``, as a GPU
    batch's parent leaves it there, so that builds under ``root`` skip parsing torch's headers (about 20 s
    each); nothing where the compiler is not GCC. The .gch is hard-linked, read-only. Returns ``root``."""
    from cudal1.evaluator.toolchain import search_dir

    header = search_dir(header_root())
    if header.is_dir():
        shutil.copytree(header, search_dir(root), copy_function=os.link)
    return root


def _alive(pid: int) -> bool:
    """True while ``pid`` runs. An orphaned server that exited may linger as a zombie: that counts as gone."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def close_run_dir(path: Path) -> None:
    """Called once, by the controlling process after every worker ended: stop the server, remove the folder."""
    pid_file = path / "prefect.pid"
    if pid_file.exists():
        pid = int(pid_file.read_text())
        own = [p for p in _started if p.pid == pid]
        if own:  # started by this very process (a run without xdist): it can wait for its child
            stop(own[0])
        elif _alive(pid):
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 10
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.2)
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
    shutil.rmtree(path, ignore_errors=True)
