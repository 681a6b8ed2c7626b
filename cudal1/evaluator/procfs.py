"""The host's processes as /proc shows them: what the harness reads to find the processes a worker
started (every one must be gone when its worker is) and to see a worker stopped before it times the
reference beside it."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class ProcessInfo:
    """One line of /proc: what the harness needs to find the processes a worker started."""

    pid: int
    state: str
    ppid: int
    session: int
    uid: int


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
    except (OSError, IndexError):
        return None
    return ProcessInfo(pid, fields[0].decode(), int(fields[1]), int(fields[3]), owner)
