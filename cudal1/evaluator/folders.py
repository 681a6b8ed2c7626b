"""Who may write where, for sandboxed workers (each a fresh uid, process.WorkerProcess).

A worker owns its own directory alone. A candidate's build folder (extensions, torch.compile's caches)
is kept across runs and can be in use by two workers of the same candidate at once: a re-check's second
worker (recheck.Twins) starts and loads beside the first measurement's. Each worker takes the folder as
its own at start; had it taken it alone, the other could no longer write there: on two H100s a
torch.compile program's first call failed with ``PermissionError`` in its Inductor cache, a folder the
second worker had just taken over, and a legitimate 3.8x program was recorded as a runtime error
(docs/gpu-runs.md#2026-11-27-twin-folders). So every worker of a candidate is also in that folder's own
group, which no other worker is in: the folder's directories are group-writable and set-group-id (what is
made in them keeps the group), and those workers make files group-writable (umask 002).
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

# Above every fresh uid (process._fresh_uid: 200_000 + below 2**30), below 2**31.
GROUP_BASE = 1_200_000_000
GROUP_SPAN = 900_000_000
SHARED_UMASK = 0o002


def candidate_group(folder: Path) -> int:
    """The group of one candidate's build folder: the same for every worker of that candidate, in every
    run, and (but for a 1 in 9e8 clash) no other folder's."""
    digest = hashlib.sha256(str(Path(folder).resolve()).encode()).digest()
    return GROUP_BASE + int.from_bytes(digest[:8], "big") % GROUP_SPAN


def take_tree(path: Path, uid: int, group: int | None = None) -> None:
    """Give ``path`` and everything in it to ``uid``. With ``group``, the tree is shared with that group:
    directories group-writable and set-group-id, files group-readable and writable."""
    gid = uid if group is None else group
    _take(str(path), uid, gid, group is not None)
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            _take(os.path.join(dirpath, name), uid, gid, group is not None)


def _take(path: str, uid: int, gid: int, shared: bool) -> None:
    mode, links = (st := os.lstat(path)).st_mode, st.st_nlink
    if stat.S_ISREG(mode) and links > 1:
        # A hard link a worker left here: handing it over would hand over the file it names, wherever that
        # is (the parent's, another program's). The kernel's protected_hardlinks stops a worker linking
        # a file it neither owns nor may write, but not every host sets it. Only the name here goes.
        os.unlink(path)
        return
    os.chown(path, uid, gid, follow_symlinks=False)
    if not shared:
        return
    if stat.S_ISDIR(mode):
        os.chmod(path, stat.S_IMODE(mode) | stat.S_ISGID | stat.S_IRWXG)
    elif stat.S_ISREG(mode):
        # chown cleared any set-id bit; a file the candidate made executable stays so
        os.chmod(path, stat.S_IMODE(mode) | stat.S_IRGRP | stat.S_IWGRP)
