"""A reference's lifetime, and every worker's close.

**The session** (:class:`ReferenceSession`): a warm worker running one problem's reference, started ahead
(process only) and loaded when its problem comes, shared by the problem's candidates. Safe to share: it never
executes candidate code, and its outputs live only in the parent.

**Kept between batches** (:class:`KeptReferences`). An RL reward call is a small batch: a few problems, a
few programs that run. Each call started every problem's reference worker again (its fork, CUDA context,
model and inputs plan): 0.1-0.2 s before the first program could be checked, out of a call of about a
second. The learning stages evaluate the same problems call after call, so ``evaluate_many(...,
references=kept)`` takes a problem's reference from ``kept`` when one is there and gives it back at the
problem's end instead of closing it. This keeps the protection: a reference worker never runs candidate
code (a candidate's worker is another process, under its own uid), so serving the next call's candidates
is what it already does within a batch. A stateful reference is built again before each candidate, as
within a batch; what carries over is the reference's init seed, as between the candidates of one batch;
every call draws fresh inputs. Only a session that finished its problem cleanly is kept, at most ``keep``
(the least recently used goes first): each holds a CUDA context and its model on the device.

**Closed beside the device loop** (:data:`CLOSER`). A worker's close is its exit (the CUDA context's
teardown, the device memory given back) and its reaping; a batch's device loop waiting for it after every
evaluation and at every problem's end spent a tenth of its time there. Within a batch
(:meth:`Closer.active`, entered by ``evaluate_many``) a close runs on a thread of its own, and the next
timing on the same device waits for it (``schedule.quiet_after``), as it waits for the loads ahead: an
exiting worker runs on its device's timed core and gives back memory on its GPU, so it must be over before
anything is timed there. Outside a batch (``evaluate-one``) a close is made where it is asked for.
"""

from __future__ import annotations

import logging
import secrets
import shutil
import tempfile
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cudal1.evaluator.config import EvalConfig
from cudal1.evaluator.process import WorkerFailure, WorkerProcess
from cudal1.evaluator.transport import TransportError
from cudal1.evaluator.workers import (
    draws_path,
    new_seed,
    prefetch_draws,
    receive_payload,
    scratch_root,
    worker_spec,
)
from cudal1.problems import Problem

log = logging.getLogger(__name__)

# --- the session ----------------------------------------------------------------------------------------

class ReferenceSession:
    """A warm worker running one problem's reference. Safe to share between candidates of that problem:
    it never executes candidate code."""

    def __init__(self, problem: Problem, config: EvalConfig, root: Path | None = None, *, load: bool = True) -> None:
        """``load=False`` starts the process only (interpreter, torch, CUDA context) and defers building the
        reference model to the first use, so a session prestarted for the next problem puts no work on the
        GPU while the current candidate is timed."""
        self.problem = problem
        self.config = config
        self._own_root = root is None
        self.root = Path(tempfile.mkdtemp(prefix="cudal1-ref-", dir=scratch_root())) if root is None else root
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o711)  # a sandboxed worker may traverse to its own directory, not list others
        self.init_seed = new_seed()
        self.path = self.root / "reference" / "reference.py"
        self.path.parent.mkdir(mode=0o700)
        self.path.write_text(problem.source)
        prefetch_draws(config)  # compiled (once per machine) while the worker starts
        self.worker = self._new_worker()
        self.build_s = 0.0
        self.graphed = False  # its worker replays inputs from a captured graph (inputs.GraphedInputs)
        self.device_draws = False  # its worker draws timed inputs with the harness's kernels (device_draws.py)
        self.stateful = False  # its output depends on earlier calls: reset before each candidate (reset())
        self._loaded = False
        self._failure = ""
        self._lock = threading.Lock()  # a batch may load it ahead from another thread
        if load:
            self.load()

    def load(self) -> None:
        """Build the reference model in its worker (once); raises ReferenceError, then again on every call."""
        with self._lock:
            self._load()

    def _load(self) -> None:
        if self._loaded:
            return
        if self._failure:
            raise ReferenceError(self._failure)
        try:
            self.worker.wait_ready(self.config.load_timeout_s)
            reply = self.worker.call({"cmd": "load", "role": "reference", "reference_path": str(self.path),
                                      "init_seed": self.init_seed, "device_draws": draws_path(self.config)},
                                     self.config.build_timeout_s)
        except WorkerFailure as exc:
            self._failure = f"{self.problem.problem_id}: reference failed to start: {exc.message}"
        else:
            if not reply.get("ok"):
                self._failure = f"{self.problem.problem_id}: reference failed to load: {reply.get('error')}"
        if self._failure:
            self.close()
            raise ReferenceError(self._failure)
        self.build_s = reply.get("build_s", 0.0)
        self.graphed = bool(reply.get("graphed"))
        self.device_draws = bool(reply.get("device_draws"))
        self.stateful = bool(reply.get("stateful"))
        self._loaded = True

    def reset(self) -> None:
        """Build the reference model again, fresh: a stateful reference then sees the same calls as the
        candidate evaluated next (one per correctness trial, then the same timed batches)."""
        self.load()
        reply = self.worker.call({"cmd": "reset"}, self.config.build_timeout_s)
        if not reply.get("ok"):
            raise ReferenceError(f"{self.problem.problem_id}: reference failed to reset: {reply.get('error')}")

    def records(self, seeds: list[int]) -> list[dict[str, Any]]:
        """Inputs and outputs of the reference for each seed, in the parent's memory. One seed per
        command, so the worker never holds more than one record's export at a time."""
        self.load()
        records: list[dict[str, Any]] = []
        for seed in seeds:
            out = self.worker.workdir / f"records-{secrets.token_hex(8)}.pt"
            reply = self.worker.call({"cmd": "reference", "seeds": [seed], "out_path": str(out)},
                                     self.config.run_timeout_s)
            got = self._payload(reply, out, "to run")
            if not isinstance(got, list) or len(got) != 1:
                raise ReferenceError(f"{self.problem.problem_id}: reference sent {type(got).__name__}, not records")
            records += got
        return records

    def warm(self, seed: int) -> None:
        """One untimed forward on fresh inputs (the warm-up before a timed batch, as its own command)."""
        self.load()
        reply = self.worker.call({"cmd": "warm", "seed": seed}, self.config.run_timeout_s)
        if not reply.get("ok"):
            raise ReferenceError(f"{self.problem.problem_id}: reference failed to warm up: {reply.get('error')}")

    def time(self, msg: dict[str, Any]) -> tuple[dict[str, Any], float, dict[str, Any]]:
        self.load()
        spot_path = self.worker.workdir / f"spot-{secrets.token_hex(8)}.pt"
        t0 = time.perf_counter()
        reply = self.worker.call(msg | {"spot_path": str(spot_path)}, self.config.run_timeout_s)
        wall = time.perf_counter() - t0
        return reply, wall, self._payload(reply, spot_path, "while timed") or {}

    def _payload(self, reply: dict[str, Any], path: Path, what: str) -> Any:
        """What a reference reply carried; any failure is the problem's, not a candidate's."""
        if not reply.get("ok"):
            raise ReferenceError(f"{self.problem.problem_id}: reference failed {what}: {reply.get('error')}")
        try:
            return receive_payload(reply, path, self.config, self.worker)
        except TransportError as exc:
            raise ReferenceError(f"{self.problem.problem_id}: reference outputs unreadable: {exc}") from exc

    def restart(self) -> None:
        """Stop the worker, giving back all its device memory, and start a fresh one that loads the same
        reference (same init seed) on its next use: room for a re-measurement's own workers beside it."""
        with self._lock:
            self.worker.close()
            self.worker = self._new_worker()
            self._loaded = False

    def _new_worker(self) -> WorkerProcess:
        return WorkerProcess(worker_spec(self.config, self.problem), self.root / "reference", "reference")

    def healthy(self) -> bool:
        """No failure recorded and its worker still running: fit to serve another batch (KeptReferences)."""
        return not self._failure and self.worker.proc.poll() is None

    def close(self) -> None:
        if hasattr(self, "worker"):
            self.worker.close()
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> ReferenceSession:
        return self

    def close_beside(self) -> None:
        """Close beside the device loop within a batch (:data:`CLOSER`; the next timing there waits for it),
        at once outside one: a batch's problem ends, or a kept reference is let go (:class:`KeptReferences`)."""
        CLOSER.close(self.config.device, self.close)

    def __exit__(self, *exc: object) -> None:
        self.close_beside()


class ReferenceError(RuntimeError):
    """The problem's own reference could not run: not the candidate's fault."""


# --- kept between batches -------------------------------------------------------------------------------

# References held between calls: an RL epoch's problems when it evaluates them in one batch (15 in the
# offline default: 3 steps of 5 prompts); a kept reference holds a process (on a GPU a CUDA context, about
# 0.5 GB, and its model) until it is taken again, evicted or closed
KEEP = 16


def _key(problem: Problem, config: EvalConfig) -> tuple[str, str]:
    """A session serves the same problem under the same config on the same device: every field of the
    config, not only the measured ones (the worker's spec and load follow some that the hash leaves out)."""
    return problem.sha256, repr(config)


class KeptReferences:
    """Problems' reference sessions between batches; thread-safe (each device loop takes and gives)."""

    def __init__(self, keep: int = KEEP) -> None:
        if keep < 1:
            raise ValueError(f"keep={keep}: keep at least one reference, or pass no KeptReferences to evaluate_many")
        self.keep = keep
        self._held: OrderedDict[tuple[str, str], ReferenceSession] = OrderedDict()
        self._lock = threading.Lock()
        self.taken = 0  # sessions handed out again (what the tests and benchmarks read)
        # closed when this pool goes, or at exit, whichever comes first: not a reference held until exit
        weakref.finalize(self, _close_held, self._held, self._lock)

    def __len__(self) -> int:
        with self._lock:
            return len(self._held)

    def take(self, problem: Problem, config: EvalConfig) -> ReferenceSession | None:
        """The problem's kept session, now the caller's, or None (start one). A session whose worker is
        gone is closed here, not handed out."""
        with self._lock:
            session = self._held.pop(_key(problem, config), None)
            healthy = session is not None and session.healthy()
            self.taken += healthy
        if session is not None and not healthy:
            session.close()
        return session if healthy else None

    def give(self, session: ReferenceSession) -> bool:
        """Keep a session whose problem ended cleanly; False when it is not kept (the caller closes it)."""
        if not session.healthy():
            return False
        evicted: list[ReferenceSession] = []
        with self._lock:
            key = _key(session.problem, session.config)
            old = self._held.pop(key, None)
            if old is not None and old is not session:
                evicted.append(old)
            self._held[key] = session
            while len(self._held) > self.keep:
                evicted.append(self._held.popitem(last=False)[1])
        for other in evicted:
            other.close_beside()
        return True

    def close(self) -> None:
        """Close every kept session (also when the pool is collected, and at exit)."""
        _close_held(self._held, self._lock)

    def __enter__(self) -> KeptReferences:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _close_held(held: OrderedDict[tuple[str, str], ReferenceSession], lock: threading.Lock) -> None:
    with lock:
        sessions = list(held.values())
        held.clear()
    for session in sessions:
        session.close()


# --- closed beside the device loop ----------------------------------------------------------------------

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
