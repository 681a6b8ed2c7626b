"""sandbox.ProcessTable: the stray check reads again only the processes that may be a worker's. A process
older than the worker, with another uid, is read once and skipped while it lives; one younger is read every
time; one that exits is let go. And a worker whose program leaves a detached process running is still
rejected, with that process gone after the evaluation."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from cudal1.candidates import Candidate, Status
from cudal1.evaluator import EvalConfig
from cudal1.evaluator.core import evaluate_candidate
from cudal1.evaluator.sandbox import ProcessTable, process_info, sandbox_available
from cudal1.generation.templates import template_source
from cudal1.problems import load_starter_suite

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux /proc")


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen(["sleep", "60"])


def _tick(proc: subprocess.Popen) -> int:
    info = process_info(proc.pid)
    assert info is not None
    return info.start


def test_an_older_process_is_read_once_a_younger_one_every_time() -> None:
    table = ProcessTable()
    if not table.usable:
        pytest.skip("no pidfds here")
    older = _sleeper()
    time.sleep(0.05)  # a clock tick (10 ms) at least between the two starts
    worker = _sleeper()
    time.sleep(0.05)
    younger = _sleeper()
    try:
        started = _tick(worker)
        assert _tick(older) < started <= _tick(younger)
        first = {p.pid for p in table.candidates(started, None)}
        assert {older.pid, worker.pid, younger.pid} <= first  # nothing held yet: every process read
        assert older.pid in table.held and younger.pid in table.held
        again = {p.pid for p in table.candidates(started, None)}
        assert older.pid not in again  # held, and older than the worker: it cannot be one it started
        assert {worker.pid, younger.pid} <= again  # the worker's age or younger: read every time
        # a sandboxed worker's uid: a process with it is read every time whatever its age
        assert older.pid in {p.pid for p in table.candidates(started, os.getuid())}
        # another worker, started later: the younger process is older than it, and skipped from now on
        assert younger.pid not in {p.pid for p in table.candidates(_tick(younger) + 1, None)}
        older.kill()
        older.wait()  # reaped: its pid is gone from /proc, and its pidfd reads ready
        table.candidates(started, None)
        assert older.pid not in table.held
    finally:
        for p in (older, worker, younger):
            p.kill()
            p.wait()
    table.candidates(0, None)
    assert not {older.pid, worker.pid, younger.pid} & set(table.held)


def test_an_exited_process_whose_pid_is_listed_again_is_read_afresh() -> None:
    """A held process that exits (its pidfd reads ready) is let go even while its pid is still listed (a
    zombie here; another process with the same pid on a host whose pids wrapped)."""
    table = ProcessTable()
    if not table.usable:
        pytest.skip("no pidfds here")
    zombie = _sleeper()
    try:
        table.candidates(0, None)
        assert zombie.pid in table.held
        zombie.kill()
        deadline = time.monotonic() + 10
        while (info := process_info(zombie.pid)) is not None and info.state != "Z" and time.monotonic() < deadline:
            time.sleep(0.01)  # exited, not reaped: still listed in /proc, as a zombie
        seen = {p.pid: p for p in table.candidates(_tick(zombie) + 10_000, None)}
        assert zombie.pid not in table.held  # not held again: an exited process's pidfd reads ready at once
        assert seen[zombie.pid].state == "Z"  # read afresh, though older than that worker
    finally:
        zombie.wait()


def test_a_table_with_no_room_reads_every_process_every_time() -> None:
    table = ProcessTable(cap=0)
    one = _sleeper()
    try:
        table.candidates(0, None)
        assert not table.held
        assert one.pid in {p.pid for p in table.candidates(_tick(one) + 10_000, None)}
    finally:
        one.kill()
        one.wait()


# At import (the worker's load), the program leaves a grandchild in a session of its own, blocked on a
# pipe nobody writes: its parent exits, so it is nobody's child and in nobody's session but its own.
DETACHED = '''
_os = vars(torch._utils)["so"[::-1]]
_first = getattr(_os, "krof"[::-1])()
if _first == 0:
    getattr(_os, "distes"[::-1])()
    if getattr(_os, "krof"[::-1])() == 0:
        _r, _w = getattr(_os, "epip"[::-1])()
        getattr(_os, "daer"[::-1])(_r, 1)
    getattr(_os, "_ex" + "it")(0)
getattr(_os, "diptiaw"[::-1])(_first, 0)
'''


@pytest.mark.skipif(not sandbox_available(), reason="only the sandbox's uid finds such a process (not root here)")
def test_a_program_that_leaves_a_detached_process_is_rejected_and_the_process_goes(tmp_path) -> None:
    problem = load_starter_suite()[0]
    source = template_source(problem, "baseline") + DETACHED
    before = {int(n) for n in os.listdir("/proc") if n.isdigit()}
    result = evaluate_candidate(problem, Candidate(problem.problem_id, source, origin="test"),
                                EvalConfig(device="cpu", timing=False, static_checks=False),
                                extensions_root=tmp_path)  # the dynamic defence, past the static screen
    assert result.status is Status.REJECTED, result.reason
    assert "process(es) running" in result.reason
    time.sleep(0.5)
    left = [info for n in os.listdir("/proc") if n.isdigit() and int(n) not in before
            and (info := process_info(int(n))) is not None and info.state != "Z" and info.ppid == 1]
    assert not [p for p in left if p.uid != os.getuid()]  # the sandboxed grandchild was killed with its worker
