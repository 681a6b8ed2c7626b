"""A parent told to stop (SIGTERM) kills its workers and the builds they started before it ends, where
before they ran on: a killed run's compile, still writing a program's build folder when the next run built
the same program there, damaged ninja's log (docs/gpu-runs.md at 88f971b, 2026-11-29-one-host-release)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cudal1.evaluator import sandbox
from cudal1.evaluator.sandbox import processes

TESTS = Path(__file__).resolve().parent


class _Child:
    """A real process standing in for a worker: ``kill`` is what reaping calls."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(["sleep", "60"])

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)


def test_sigterm_kills_the_live_workers_then_does_what_it_did_before() -> None:
    seen: list[int] = []
    before = signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))
    try:
        assert sandbox.reap_on_term() and sandbox.reap_on_term()  # once in place, it stays the one handler
        live, gone = _Child(), _Child()
        sandbox.track(live)
        sandbox.track(gone)
        sandbox.forget(gone)  # closed by its owner: not the handler's
        os.kill(os.getpid(), signal.SIGTERM)
        deadline = time.monotonic() + 5
        while not seen and time.monotonic() < deadline:
            time.sleep(0.01)
        assert seen == [signal.SIGTERM]  # the handler before still ran, after the kill
        assert live.proc.poll() is not None and gone.proc.poll() is None
        gone.kill()
        assert live not in sandbox.live()
    finally:
        signal.signal(signal.SIGTERM, before)
        sandbox._INSTALLED.clear()


def _compiling(folder: Path) -> list[int]:
    """Compilers building under ``folder`` (their command lines name the sources there)."""
    found = []
    for p in processes():
        try:
            cmdline = Path(f"/proc/{p.pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(folder) in cmdline and ("c++" in cmdline or "cc1plus" in cmdline):
            found.append(p.pid)
    return found


PARENT = """
import sys
from pathlib import Path
from ext_helpers import FAST, fallback_program, fixture_problem
from cudal1.candidates import Candidate
from cudal1.evaluator.batch import evaluate_many
problem = fixture_problem("scale_shift")
source = fallback_program("cudal1_reaped_build", '''
#include <torch/extension.h>
torch::Tensor scale_shift(torch::Tensor x) { return x * 2 + 1; }
''')
evaluate_many([problem], [Candidate(problem.problem_id, source)], FAST, devices=["cpu"],
              extensions_root=Path(sys.argv[1]), build_workers=1)
"""


@pytest.mark.slow  # one C++ extension build, stopped partway (about 10 s on the CPU machine)
def test_a_parent_stopped_by_sigterm_leaves_no_build_running(ext_root: Path) -> None:
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(TESTS), str(TESTS.parent), os.environ.get("PYTHONPATH", "")])}
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(ext_root)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while not _compiling(ext_root) and parent.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _compiling(ext_root), f"no build started: {parent.poll()}, {parent.stdout.read() if parent.poll() is not None else ''}"
        parent.send_signal(signal.SIGTERM)
        assert parent.wait(timeout=30) == -signal.SIGTERM  # it still ends as SIGTERM ends it
        deadline = time.monotonic() + 5
        while _compiling(ext_root) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _compiling(ext_root) == []  # before, the compile ran on after its parent, to its end
    finally:
        if parent.poll() is None:
            parent.kill()
