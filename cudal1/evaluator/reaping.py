"""The parent's live workers, killed with everything they started when the parent is told to stop (SIGTERM).

Each worker runs in a session of its own, so a parent that dies leaves them behind, and with them the
compilers a build worker started: they run to their end (60-230 s for a CUDA build on the H100 host),
on the cores the next run builds and times on. A timeout, a cancelled Prefect flow run and `kill` all
send SIGTERM first; on it the parent now kills every live worker's process group and everything running
under its uid, then stops as it would have. A killed run's compiles, still writing a program's build
folder when the next run built the same program there, damaged ninja's log of two release programs, and
every later load of them compiled again (docs/gpu-runs.md#2026-11-29-one-host-release).

SIGKILL cannot be caught: a parent killed that way still leaves its workers (toolchain.py mends what
their builds may damage).
"""

from __future__ import annotations

import signal
import threading
import weakref
from types import FrameType
from typing import Any, Protocol


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
