"""Ninja's dependency log in an extension's build folder, read whole or found damaged.

torch builds an extension with ninja, which records each object's header dependencies and the object's
time in the folder's ``.ninja_deps``. Two ninjas writing one folder at once (a killed run's compiles
still going when the next run builds the same program; torch's lock file removed under a live build)
leave records out of order. Ninja then warns "premature end of file; recovering" on every later build,
finds the object's recorded time out of date, and compiles it again, and on ninja 1.13 the log stays
damaged, so every load of that program compiles again, for good: L1-88 and L1-97 of CUDA-L1's H100
release compiled for 55-72 s in each load, cold and warm, with the device waiting behind them
(docs/gpu-runs.md#2026-11-29-one-host-release). Removing the damaged log makes the next build compile
once and write it afresh (docs/evaluator.md, "Builds done again").

Standard library only: the worker and the parent both read it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

DEPS_LOG = ".ninja_deps"
MAX_LOG = 16 << 20  # an extension's log holds a few objects' headers: kilobytes
_HEADER = b"# ninjadeps\n"
_MAX_RECORD = (1 << 19) - 1  # ninja's kMaxRecordSize: a longer record is read as damage


def deps_log_damage(data: bytes) -> str:
    """What is wrong with a deps log's bytes, '' when ninja would read every record (format 3 or 4).

    A path record is the path, padded to 4 bytes, then the bitwise complement of its index, which is how
    ninja finds a record written out of order; a dependency record (size's high bit set) names the
    object and its dependencies by those indices, after the object's time (8 bytes in format 4).

    >>> path = lambda p, i: (len(p) + 4).to_bytes(4, "little") + p + (~i & 0xFFFFFFFF).to_bytes(4, "little")
    >>> deps = (16 | 1 << 31).to_bytes(4, "little") + bytes(4) + bytes(8) + (1).to_bytes(4, "little")
    >>> good = _HEADER + (4).to_bytes(4, "little") + path(b"main.o\\0\\0", 0) + path(b"main.cpp", 1) + deps
    >>> deps_log_damage(good)
    ''
    >>> deps_log_damage(good + path(b"main.o\\0\\0", 0))  # a second writer's first record
    'path record 2 at byte 68 says it is record 0'
    >>> deps_log_damage(good[:-3])
    'record at byte 48 ends past the end of the file (65 bytes)'
    """
    if not data.startswith(_HEADER) or len(data) < len(_HEADER) + 4:
        return "no ninja deps header"
    version = int.from_bytes(data[12:16], "little")
    if version not in (3, 4):
        return f"format {version}, not 3 or 4"
    first_dep = 3 if version == 4 else 2  # object id, then its time: two words in format 4, one in 3
    offset, nodes = 16, 0
    while offset < len(data):
        if offset + 4 > len(data):
            return f"record at byte {offset} cut short"
        word = int.from_bytes(data[offset:offset + 4], "little")
        is_deps, size = bool(word >> 31), word & 0x7FFFFFFF
        if size > _MAX_RECORD or size % 4 or size < 4:
            return f"record at byte {offset} has size {size}"
        body = data[offset + 4:offset + 4 + size]
        if len(body) < size:
            return f"record at byte {offset} ends past the end of the file ({len(data)} bytes)"
        if is_deps:
            ids = [int.from_bytes(body[i:i + 4], "little", signed=True) for i in range(0, size, 4)]
            if len(ids) < first_dep or not all(0 <= i < nodes for i in [ids[0], *ids[first_dep:]]):
                return f"dependency record at byte {offset} names a path not recorded before it"
        else:
            said = ~int.from_bytes(body[-4:], "little") & 0xFFFFFFFF
            if said != nodes:
                return f"path record {nodes} at byte {offset} says it is record {said}"
            nodes += 1
        offset += 4 + size
    return ""


def _read_regular(path: Path, limit: int) -> bytes | None:
    """A regular file's bytes, at most ``limit``; None for anything else. The folder is a candidate's: the
    parent reads it as root, so a link is not followed, and a pipe or a device (which would block or never
    end) is not read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, limit)
    except OSError:
        return None
    finally:
        os.close(fd)


def damaged(folder: Path) -> str:
    """What is wrong with ``folder``'s deps log, '' when it is whole, absent or unreadable (ninja then
    says so itself). A log larger than ninja's own builds ever write (``MAX_LOG``) is damage too."""
    data = _read_regular(folder / DEPS_LOG, MAX_LOG + 1)
    if data is None:
        return ""
    if len(data) > MAX_LOG:
        return f"larger than {MAX_LOG} bytes"
    return deps_log_damage(data)


def heal(folder: Path) -> str:
    """Remove ``folder``'s deps log if it is damaged, so the next build compiles once and writes it afresh;
    returns what was wrong ('' when nothing was, or the log could not be removed)."""
    why = damaged(folder)
    if not why:
        return ""
    try:
        (folder / DEPS_LOG).unlink()
    except OSError:
        return ""
    return why


def damaged_builds(candidate_folder: Path) -> list[str]:
    """The build folders under one candidate's extensions folder whose deps log is damaged, with why."""
    try:
        folders = [f for f in candidate_folder.iterdir() if (f / "build.ninja").is_file()]
    except OSError:
        return []
    return [f"{f.name}: {why}" for f in sorted(folders) if (why := damaged(f))]
