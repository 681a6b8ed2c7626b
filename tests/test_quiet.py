"""builds.Quiet: the build workers (and every compiler they started) stopped while any device times; real
processes, their state read from /proc."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from cudal1.evaluator.builds import Quiet


@dataclass(frozen=True)
class _Stoppable:  # what Quiet reads of a WorkerProcess
    pid: int
    uid: int | None = None


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_quiet_stops_build_workers_and_their_compilers_while_timing() -> None:
    """A build worker (session leader) whose compiler sits in its own process group, as ninja starts
    them: both stop while a device times, and both run again afterwards."""
    code = ("import os, subprocess, sys, time\n"
            "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], process_group=0)\n"
            "print(child.pid, flush=True)\ntime.sleep(60)\n")
    leader = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        compiler = int(leader.stdout.readline())  # type: ignore[union-attr]
        assert os.getpgid(compiler) != os.getpgid(leader.pid)  # a signal to the leader's group would miss it
        quiet = Quiet()
        quiet.add(_Stoppable(leader.pid))  # type: ignore[arg-type]
        with quiet():
            with quiet():  # a second device timing at once: builds stay stopped until both are done
                pass
            time.sleep(0.2)
            assert _state(leader.pid) == "T" and _state(compiler) == "T"
        time.sleep(0.2)
        assert _state(leader.pid) != "T" and _state(compiler) != "T"
    finally:
        os.killpg(leader.pid, 9)
        os.killpg(compiler, 9)
        leader.wait()


def test_a_worker_taken_out_while_a_device_times_runs_again() -> None:
    """Two devices: one times while the other takes its next worker (a torch.compile start, stopped as
    builds are) for its own load. That worker must run at once, not stay stopped until its start times out
    (six H200 evaluations were recorded as the program's timeout that way)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        quiet, worker = Quiet(), _Stoppable(proc.pid)
        quiet.add(worker)  # type: ignore[arg-type]
        with quiet():  # the other device times
            time.sleep(0.2)
            assert _state(proc.pid) == "T"
            quiet.discard(worker)  # type: ignore[arg-type]
            time.sleep(0.2)
            assert _state(proc.pid) != "T"
        assert not quiet.workers
    finally:
        proc.kill()
        proc.wait()


def test_a_build_a_waiting_device_needs_goes_on_while_another_device_times() -> None:
    """On a GPU's host a device that waits for a group lets that group's builds go on while the other
    device times (Quiet.letting_go); other builds stay stopped, and the let-go build is stopped again
    once no device waits for it."""
    procs = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
             for _ in range(2)]
    try:
        quiet = Quiet()
        needed, other = (_Stoppable(p.pid) for p in procs)
        quiet.add(needed, "sha-needed")  # type: ignore[arg-type]
        quiet.add(other, "sha-other")  # type: ignore[arg-type]
        with quiet():  # a device times
            time.sleep(0.2)
            assert [_state(p.pid) for p in procs] == ["T", "T"]
            with quiet.letting_go({"sha-needed"}), quiet.letting_go({"sha-needed"}):  # two devices wait for it
                time.sleep(0.2)
                assert _state(procs[0].pid) != "T" and _state(procs[1].pid) == "T"
                with quiet():  # the other device times again meanwhile: the needed build goes on
                    time.sleep(0.2)
                    assert _state(procs[0].pid) != "T"
            time.sleep(0.2)
            assert [_state(p.pid) for p in procs] == ["T", "T"]
        time.sleep(0.2)
        assert all(_state(p.pid) != "T" for p in procs) and not quiet.free
    finally:
        for p in procs:
            p.kill()
            p.wait()


def _stopped(pid: int) -> bool:
    """Whether ``pid`` is stopped, given the signal half a second to arrive (it is delivered asynchronously)."""
    for _ in range(50):
        if _state(pid) in "Tt":
            return True
        time.sleep(0.01)
    return False


def test_a_build_held_while_a_device_times_stops_at_once_and_runs_when_let_go() -> None:
    """A build worker held while a device already times is stopped at once; it runs again when its block
    ends, though the device still times, and stays stopped while a second device times too."""
    procs = [subprocess.Popen(["sleep", "60.517"], start_new_session=True) for _ in range(2)]
    build, added = (_Stoppable(p.pid) for p in procs)
    quiet = Quiet()
    try:
        with quiet.holding(build):  # type: ignore[arg-type]
            assert not _stopped(build.pid)
            with quiet():
                assert _stopped(build.pid)
                with quiet():  # a second device
                    assert _stopped(build.pid)
                assert _stopped(build.pid)  # the first device still times
                with quiet.holding(added):  # type: ignore[arg-type]
                    assert _stopped(added.pid)  # held while a device times: stopped at once
                assert not _stopped(added.pid)  # let go when its block ends, though the device still times
            assert not _stopped(build.pid)
    finally:
        for p in procs:
            p.kill()
            p.wait()
