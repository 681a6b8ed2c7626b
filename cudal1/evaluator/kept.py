"""Reference workers kept warm from one batch to the next (:class:`KeptReferences`).

An RL reward call is a small batch: a few problems, a few programs that run. Each call started every
problem's reference worker again (its fork, CUDA context, model and inputs plan): about 0.13 s on an H200
and 0.2 s on the 2-core CPU machine before the first program could be checked, out of a call of about a
second (docs/gpu-runs.md#2026-12-02-static-verdicts). The learning stages evaluate the same problems call
after call, so ``evaluate_many(..., references=kept)`` takes a problem's reference from ``kept`` when one is
there and gives it back at the problem's end instead of closing it.

Why this keeps the protection: a reference worker never runs candidate code (a candidate's worker is another
process, under its own uid), so a reference serving the candidates of the next call is what it already is
within a batch, where one reference serves all of a problem's candidates in turn. A stateful reference is
built again before each candidate, as within a batch. What carries over is the reference's init seed, as it
does between the candidates of one batch; every call draws fresh inputs.

Only a session that finished its problem cleanly is kept: one whose problem ended on an error, whose worker
died, or that failed to load is closed as before. At most ``keep`` sessions are held (the least recently
used goes first): each holds a CUDA context and its model on the device between calls.

Standard library only (a session is only named, for its type)."""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cudal1.evaluator.config import EvalConfig
    from cudal1.evaluator.workers import ReferenceSession
    from cudal1.problems import Problem

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
