"""Workers closed beside a batch's device loop instead of on it. A worker's close is its exit (the CUDA
context's teardown, the device memory given back) and its reaping, and a batch's device loop waited for it
after every evaluation and at every problem's end: 9.4% of the loop's time on the warm release sample on an
H200 (docs/gpu-runs.md#2026-11-30-parent-stacks). Within a batch (:meth:`Closer.active`, entered by
``evaluate_many``) a close runs on a thread of its own, and the next timing on the same device waits for it
(``schedule.quiet_after``), as it waits for the loads ahead: an exiting worker runs on its device's timed
core and gives back memory on its GPU, so it must be over before anything is timed there. Outside a batch
(``evaluate-one``, the benchmarks) a close is made where it is asked for, as before.

Standard library only (a worker is only named, for its type)."""

from __future__ import annotations

import logging
import shutil
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cudal1.evaluator.process import WorkerProcess

log = logging.getLogger(__name__)


def _quietly(close: Callable[[], None]) -> None:
    try:
        close()
    except Exception:  # noqa: BLE001 - a close that fails is logged; the batch goes on
        log.exception("closing a worker failed")


class Closer:
    """The closes in flight, by device (``WorkerSpec.device``: ``cuda:0``, ``cpu``)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pending: dict[str, set[Future]] = {}
        self.pool: ThreadPoolExecutor | None = None
        self.users = 0

    @contextmanager
    def active(self) -> Iterator[None]:
        """Closes run beside the caller until the block ends; at its end every close is over (no worker
        outlives the batch)."""
        with self.lock:
            if self.users == 0:
                self.pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="cudal1-close")
            self.users += 1
        try:
            yield
        finally:
            self.wait()
            with self.lock:
                self.users -= 1
                pool, self.pool = (self.pool, None) if self.users == 0 else (None, self.pool)
            if pool is not None:
                pool.shutdown(wait=True)

    def close(self, device: str, close: Callable[[], None]) -> None:
        """``close`` beside the caller within a batch, else now."""
        with self.lock:
            pool = self.pool
            future = pool.submit(_quietly, close) if pool is not None else None
            if future is not None:
                self.pending.setdefault(device, set()).add(future)
        if future is None:
            close()
            return
        future.add_done_callback(lambda f: self._done(device, f))

    def _done(self, device: str, future: Future) -> None:
        with self.lock:
            self.pending.get(device, set()).discard(future)

    def wait(self, device: str | None = None) -> bool:
        """Until the closes of ``device`` (every device: None) are over; whether there were any."""
        with self.lock:
            futures = [f for d, fs in self.pending.items() if device is None or d == device for f in fs]
        if futures:
            wait(futures)
        return bool(futures)


CLOSER = Closer()


def close_worker(worker: WorkerProcess) -> None:
    """A worker stopped and its directory removed (an evaluation's, or one started ahead that will not be
    used): beside the device loop within a batch (:data:`CLOSER`), at once outside one."""

    def close() -> None:
        worker.close()
        shutil.rmtree(worker.workdir.parent, ignore_errors=True)

    CLOSER.close(worker.spec.device, close)
