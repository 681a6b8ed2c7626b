"""What keeps workers apart on the host, and what lets none of them outlive the harness.

**Who may write where.** Each worker runs as a fresh uid (process.WorkerProcess) and owns its own directory
alone. A candidate's build folder (extensions, torch.compile's caches) is kept across runs and can be in use
by two workers of the same candidate at once: a re-check's second worker (recheck.Twins) starts and loads
beside the first measurement's. Had each taken the folder as its own alone, the other could no longer write
there (a legitimate torch.compile program then failed its first call with ``PermissionError`` in its
Inductor cache). So every worker of a candidate is also in that folder's own group, which no other worker is
in: the folder's directories are group-writable and set-group-id (what is made in them keeps the group), and
those workers make files group-writable (umask 002).

**The host's processes** as /proc shows them: what the harness reads to find the processes a worker started
(every one must be gone when its worker is) and to see a worker stopped before the reference is timed
beside it.

**Which cores a worker runs on**, on a GPU's host: each device's timed workers (its reference and its
candidates) on one core of their own, in the upper half of the cores this process may use; the starts of
workers and the builds on the lower half, where no device times.

**Reaping.** Each worker runs in a session of its own, so a parent that dies leaves them behind, and with
them the compilers a build worker started: they run to their end (minutes for a CUDA build), on the cores
the next run builds and times on, and a killed run's compiles still writing a program's build folder when
the next run built it there damaged ninja's log (toolchain.py mends such logs). A timeout, a cancelled
Prefect flow run and ``kill`` all send SIGTERM first; on it the parent kills every live worker's process
group and everything running under its uid (:func:`reap_on_term`), then stops as it would have. SIGKILL
cannot be caught: a parent killed that way still leaves its workers.

Standard library only.
"""

from __future__ import annotations

import functools
import hashlib
import os
import resource
import secrets
import select
import signal
import stat
import sys
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

# --- who may write where ----------------------------------------------------------------------------------

@functools.cache
def sandbox_available() -> bool:
    """True when the parent is root and an unprivileged uid can run this interpreter and this package
    (every ancestor directory traversable by others). `make setup` makes it so on a root machine."""
    if os.geteuid() != 0:
        return False
    paths = {Path(sys.executable).resolve(), Path(sys.prefix), Path(sys.base_prefix), Path(repo_root())}
    for path in paths:
        for part in [path, *path.parents]:
            try:
                mode = part.stat().st_mode
            except OSError:
                return False
            if part.is_dir() and not mode & stat.S_IXOTH:
                return False
    return True


def fresh_uid() -> int | None:
    """A uid no other process has. Run as that uid, a worker cannot signal the parent or the reference
    worker, read their files, or hide a forked child: everything it starts carries the uid."""
    if not sandbox_available():
        return None
    return 200_000 + secrets.randbelow(1 << 30)


def repo_root() -> str:
    return str(Path(__file__).resolve().parents[2])


# Above every fresh uid (fresh_uid: 200_000 + below 2**30), below 2**31.
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


# --- the host's processes --------------------------------------------------------------------------------

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
    host: on a GPU host evaluating the release, 200-300 processes, 3.3-4.5 ms a read, 4-5% of the device
    loop's time.

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


def reaches_state(pid: int, states: tuple[str, ...], timeout_s: float) -> bool:
    """Poll /proc until the process shows one of ``states``; False when it did not in time, is gone (or a
    zombie), or /proc is absent."""
    deadline = time.monotonic() + timeout_s
    while (info := process_info(pid)) is not None and info.state not in ("Z", "X"):
        if info.state in states:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.00005)
    return False


# --- which cores a worker runs on -------------------------------------------------------------------------

def timed_core(device: str, core: int | None = None) -> int | None:
    """The core a timed worker runs on, or None to leave it to the scheduler. A GPU's timed workers get one
    core of their own: the launch of a small kernel is host work, and a process that migrates between
    cores, or lands beside a busy one, times the same program differently from one trial to the next.
    Both programs of a pair share that core (they are never timed at once), so neither is favoured. On a
    CPU device the parent names the core (one per problem): a load that sits on one core for seconds then
    slows both programs of the pair alike instead of one of them."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    if not device.startswith("cuda"):
        return core if core is not None and core in os.sched_getaffinity(0) else None
    if os.environ.get("CUDA_VISIBLE_DEVICES") == "" or os.nice(0) > 0:
        return None  # a build worker (no GPU, or low priority): its cores are the spare ones
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 4:
        return None  # too few cores to give one away
    index = int(device.split(":")[1]) if ":" in device else 0
    return allowed[-1 - index % (len(allowed) // 2)]


def spare_cores() -> set[int] | None:
    """The cores no device times on (the lower half of those allowed; :func:`timed_core` takes from the
    upper half), or None where there are too few to split."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    allowed = sorted(os.sched_getaffinity(0))
    return set(allowed[:len(allowed) - len(allowed) // 2]) if len(allowed) >= 4 else None


def set_affinity(cores: int | set[int] | None) -> None:
    """This thread's cores (threads started later inherit them); None leaves them as they are."""
    if cores is None or not hasattr(os, "sched_setaffinity"):
        return
    try:
        os.sched_setaffinity(0, {cores} if isinstance(cores, int) else cores)
    except OSError:
        pass


@contextmanager
def on_cores(cores: set[int] | None) -> Iterator[None]:
    """This thread on ``cores`` for the block, back on the cores it had after it (also when the block
    raises); a no-op for None. A GPU worker's load prepares the reference's inputs (the plan, the
    harness's draws, the input graph) on its spare cores before any program code runs: on its device's
    timed core that preparation queued behind the other loads ahead and the timed candidate's checks, all
    on that one core, while timing waited for the loads."""
    if cores is None or not hasattr(os, "sched_getaffinity"):
        yield
        return
    before = os.sched_getaffinity(0)
    set_affinity(cores)
    try:
        yield
    finally:
        set_affinity(before)


# --- reaping ---------------------------------------------------------------------------------------------

class Killable(Protocol):
    def kill(self) -> None: ...


_LIVE: weakref.WeakSet[Any] = weakref.WeakSet()
_LOCK = threading.Lock()
_INSTALLED: list[Any] = []  # the handler this module installed, once


def track(worker: Killable) -> None:
    """Count ``worker`` as live until :func:`forget`."""
    with _LOCK:
        _LIVE.add(worker)


def forget(worker: Killable) -> None:
    with _LOCK:
        _LIVE.discard(worker)


def live() -> list[Killable]:
    with _LOCK:
        return list(_LIVE)


def kill_live() -> None:
    """Kill every live worker (its process group and anything under its uid)."""
    for worker in live():
        try:
            worker.kill()
        except Exception:  # noqa: BLE001  one that cannot be killed must not keep the others alive
            pass
        forget(worker)


def reap_on_term() -> bool:
    """Make SIGTERM kill the live workers first, then do what it did before (the previous handler, or the
    default: the process ends). Only the main thread may set a handler: elsewhere, and where SIGTERM is
    ignored, nothing changes. Returns whether the handler is in place."""
    if _INSTALLED and signal.getsignal(signal.SIGTERM) is _INSTALLED[0]:
        return True
    if threading.current_thread() is not threading.main_thread():
        return False
    previous = signal.getsignal(signal.SIGTERM)
    if previous is signal.SIG_IGN:
        return False

    def handler(signum: int, frame: FrameType | None) -> None:
        kill_live()
        if callable(previous):
            previous(signum, frame)
            return
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.raise_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, handler)
    _INSTALLED[:] = [handler]
    return True
