"""The host's processes as /proc shows them: what the harness reads to find the processes a worker
started (every one must be gone when its worker is) and to see a worker stopped before it times the
reference beside it."""

from __future__ import annotations

import os
import resource
import select
import threading
from dataclasses import dataclass


@dataclass(frozen=True)
class ProcessInfo:
    """One line of /proc: what the harness needs to find the processes a worker started."""

    pid: int
    state: str
    ppid: int
    session: int
    uid: int
    start: int = 0  # clock ticks after boot (stat's starttime): a process's age, for ProcessTable


def processes() -> list[ProcessInfo]:
    """Every process visible in /proc (those that vanish while read are skipped)."""
    return [info for name in os.listdir("/proc") if name.isdigit() and (info := process_info(int(name)))]


def process_info(pid: int) -> ProcessInfo | None:
    """One process's line of /proc; None where it is gone or /proc does not tell."""
    # Raw os calls: processes() runs after every command a worker answers, over every process of the host
    # (Path.read_text and Path.stat cost ~60 us a process; a busy GPU host has hundreds).
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
        try:
            owner = os.fstat(fd).st_uid
            raw = os.read(fd, 4096)
        finally:
            os.close(fd)
        fields = raw.rsplit(b")", 1)[1].split()  # state ppid pgrp session ...
        if owner == 0:
            owner = _real_uid(pid)
    except (OSError, IndexError, ValueError):
        return None
    return ProcessInfo(pid, fields[0].decode(), int(fields[1]), int(fields[3]), owner, int(fields[19]))


def _real_uid(pid: int) -> int:
    """The process's real uid, from its status. /proc shows a process that is not dumpable as root's,
    whatever its uid: one that changed its uid without an exec after (a worker forked from the fork server,
    and everything it forks) or that cleared the flag itself (prctl). So a stray of a sandboxed worker
    read as root's, and a double-forked child that left the session was neither found nor killed with its
    worker (tests/test_process_table.py). Read only where the owner shows as root: every other process
    shows its own uid."""
    fd = os.open(f"/proc/{pid}/status", os.O_RDONLY)
    try:
        raw = os.read(fd, 8192)
    finally:
        os.close(fd)
    line = raw[raw.index(b"\nUid:") + 5:].split(b"\n", 1)[0]
    return int(line.split()[0])


class ProcessTable:
    """The host's processes for :meth:`WorkerProcess.stray_processes`, read again only where a process could
    be a worker's. The stray check runs after every command a worker answers, over every process of the
    host: on an H200 host evaluating the release, 200-300 processes, 3.3-4.5 ms a read, 4-5% of the device
    loop's time (docs/gpu-runs.md#2026-11-30-parent-stacks).

    A process that started before a worker can never become one the worker started: it is not the worker's
    descendant, so it is never reparented to it; setsid() makes a new session, never joins the worker's; and
    only a privileged process changes its uid. So a process read once, and older than the worker, with
    another uid, is skipped from then on, for as long as it lives. Its life is held as a pidfd: one that
    exits reads as ready, and its pid, if another process takes it, is read afresh. Every process younger
    than the worker, or that could not be held, is read every time, as before. Where pidfds are not there
    (another OS, an old kernel) nothing is held and every process is read every time."""

    def __init__(self, cap: int | None = None) -> None:
        self.lock = threading.Lock()
        self.held: dict[int, tuple[int, ProcessInfo]] = {}  # pid -> (pidfd, its first reading)
        self.pids: dict[int, int] = {}  # pidfd -> pid
        self.poll = select.poll() if hasattr(select, "poll") else None
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        # a quarter of this process's descriptors at most: workers' pipes and sockets need the rest
        self.cap = cap if cap is not None else max(0, min(4096, (soft if soft > 0 else 1024) // 4))
        self.usable = hasattr(os, "pidfd_open") and self.poll is not None

    def _drop(self, pid: int) -> None:
        fd, _ = self.held.pop(pid)
        del self.pids[fd]
        assert self.poll is not None
        self.poll.unregister(fd)
        os.close(fd)

    def _hold(self, pid: int) -> ProcessInfo | None:
        """The process's reading, held when there is room: the pidfd is opened before the reading, so a
        pid taken by another process in between is one whose pidfd (of the one that exited) reads ready."""
        if not self.usable or len(self.held) >= self.cap:
            return process_info(pid)
        try:
            fd = os.pidfd_open(pid)
        except OSError:  # gone, or no room for one more descriptor
            return process_info(pid)
        info = process_info(pid)
        alone = select.poll()
        alone.register(fd, select.POLLIN)
        if info is None or alone.poll(0):  # exited already (a zombie too): nothing held
            os.close(fd)
            return info
        assert self.poll is not None
        self.poll.register(fd, select.POLLIN)
        self.held[pid], self.pids[fd] = (fd, info), pid
        return info

    def candidates(self, started: int, uid: int | None) -> list[ProcessInfo]:
        """The processes that may be those of a worker that started at ``started`` (clock ticks after
        boot, :attr:`ProcessInfo.start`) with ``uid`` (None: not sandboxed): every process but those held
        that are older than it and have another uid."""
        with self.lock:
            names = os.listdir("/proc")  # first: a pid listed here and taken over after is read next time
            if self.usable and self.held:
                assert self.poll is not None
                for fd, _ in self.poll.poll(0):  # exited: its pid is no longer the process read
                    self._drop(self.pids[fd])
            out = []
            seen = set()
            for name in names:
                if not name.isdigit():
                    continue
                pid = int(name)
                seen.add(pid)
                held = self.held.get(pid)
                if held is not None:
                    first = held[1]
                    if first.start < started and (uid is None or first.uid != uid):
                        continue
                    info = process_info(pid)
                else:
                    info = self._hold(pid)
                if info is not None:
                    out.append(info)
            for pid in [p for p in self.held if p not in seen]:
                self._drop(pid)
            return out


TABLE = ProcessTable()
