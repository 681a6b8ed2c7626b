"""WorkerProcess.wait_asleep: the parent reads a candidate's CPU over the reference's warm-up only once the
candidate's worker is back in its wait for a command. A worker continued after a stop (SIGCONT) runs for
0.3-2.4 ms on its way back there; read at once, that tail rejected honest programs for "a thread left
running" (docs/evaluator.md at 88f971b, "An honest program rejected for its own wake-up")."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from cudal1.evaluator.process import SETTLE_S, WorkerProcess
from cudal1.evaluator.sandbox import process_info
from cudal1.evaluator.timing import process_cpu_s, sample

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs /proc")


def _start(code: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE)


def _wait(worker: SimpleNamespace, timeout_s: float = SETTLE_S) -> bool:
    return WorkerProcess.wait_asleep(worker, timeout_s)  # type: ignore[arg-type]


def _ready(proc: subprocess.Popen) -> None:
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"


def test_a_worker_waiting_for_a_command_is_asleep_at_once() -> None:
    proc = _start("import sys; print('ready', flush=True); sys.stdin.readline()")
    try:
        _ready(proc)
        started = time.monotonic()
        assert _wait(SimpleNamespace(pid=proc.pid), 1.0)
        assert time.monotonic() - started < 0.5
    finally:
        proc.kill()
        proc.wait()


def test_a_continued_worker_is_waited_for_and_is_then_idle() -> None:
    """Stopped and continued, as the parent does around every reference batch: once asleep again, the
    worker uses no CPU while it waits, so a window read from then on holds only what the program does."""
    proc = _start("import sys; print('ready', flush=True); sys.stdin.readline()")
    worker = SimpleNamespace(pid=proc.pid)
    try:
        _ready(proc)
        for _ in range(20):
            os.kill(proc.pid, signal.SIGSTOP)
            while (info := process_info(proc.pid)) is not None and info.state not in ("T", "t"):
                time.sleep(0.0001)
            os.kill(proc.pid, signal.SIGCONT)
            assert _wait(worker, 1.0)
            before = sample(proc.pid)
            time.sleep(0.003)
            # nothing of its own runs while it waits: only a wake-up could, and it came before the window
            assert process_cpu_s(before, sample(proc.pid)) < 0.0003
    finally:
        proc.kill()
        proc.wait()


def test_a_worker_that_keeps_running_is_read_as_it_is_after_the_bound() -> None:
    """A worker kept from its wait (a thread holding the GIL, a loop) never falls asleep: the wait ends at
    its bound and says so, and the CPU read after it counts."""
    proc = _start("print('ready', flush=True)\nwhile True: pass")
    try:
        _ready(proc)
        started = time.monotonic()
        assert not _wait(SimpleNamespace(pid=proc.pid), 0.05)
        assert time.monotonic() - started >= 0.05
        # it keeps running, and what it runs is read: over long enough a window to get its share of a core on a
        # machine busy with the suite's other workers
        before = sample(proc.pid)
        time.sleep(0.5)
        assert process_cpu_s(before, sample(proc.pid)) > 0.01
    finally:
        proc.kill()
        proc.wait()


def test_a_process_that_is_gone_is_not_waited_for() -> None:
    proc = _start("pass")
    proc.wait()
    started = time.monotonic()
    assert not _wait(SimpleNamespace(pid=proc.pid), 1.0)
    assert time.monotonic() - started < 0.5
