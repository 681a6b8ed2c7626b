"""Clocks that decide a self-timing program's race for it, in a confirmation process only.

A program that picks its path by timing its variants (flag ``reads_clock``) returns whatever its winning
variant returns. L1-13 times float32 ``matmul`` against its float16 autocast path over two calls each and
keeps the faster; the float16 path's output is incorrect. Which path wins depends on the host and the
device at that moment, and the processes of one run tend to see the same moment: on one H200 its first
process and three confirmations under fresh weights all took the float32 path in two runs of seven, and all
four passed. More processes ask the same question again.

So a confirmation answers it differently on purpose: every read of the program's clock advances that
clock by a jump on top of the real time, and the jumps change with each read. Under ``first`` each jump is
larger than the last, so an interval read later looks longer and the variant the program timed first wins
its comparison; under ``last`` each jump is smaller than the last, so the variant timed last wins. A
program that compares two variants (or keeps the minimum of several) is thus made to take its first-timed
path in one confirmation and its last-timed path in the other, whatever the real times are, and it must be
correct on both. The clocks stay monotonic, so loops on a deadline end; a program that fails only because
its clock ran ahead (a timeout of its own) is not failed for it (recheck.confirm).

Covered: ``time``'s clocks (``time``, ``perf_counter``, ``monotonic``, ``process_time``, ``thread_time`` and
their ``_ns`` forms, read through the module or imported by name after the install), ``datetime``'s
``now``, ``utcnow`` and ``today`` (imported after it), and CUDA events' ``elapsed_time`` (``timeit`` is
refused outright, static.py). Not covered: a timer bound before the program was loaded (e.g.
``torch.utils.benchmark``'s, bound when the harness imported it) and cuDNN's own benchmark mode."""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable
from typing import Any

SKEWS = ("first", "last")  # a confirmation's clock, in turn: the first-timed variant wins, then the last
STEP_S = 1.0  # how much each jump differs from the one before: beats any real difference under a second
READS = 100_000  # jumps stop after this many reads ("last" counts down from it), the clock then runs true
_CLOCKS = ("time", "perf_counter", "monotonic", "process_time", "thread_time")


class SkewedClock:
    """One process's skew: the offset added to every clock, advanced by each read (of any clock)."""

    def __init__(self, favour: str, step_s: float = STEP_S, reads: int = READS) -> None:
        if favour not in SKEWS:
            raise ValueError(f"clock skew {favour!r}: use one of {', '.join(SKEWS)}")
        self.favour, self.step_s, self.reads = favour, step_s, reads
        self.count = 0
        self.offset_s = 0.0

    def jump(self) -> float:
        """Advance by this read's jump; the offset to add to the real time now."""
        self.count += 1
        if self.count <= self.reads:
            n = self.count if self.favour == "first" else self.reads - self.count + 1
            self.offset_s += self.step_s * n
        return self.offset_s

    def seconds(self, real: Callable[[], float]) -> Callable[[], float]:
        def read() -> float:
            return real() + self.jump()
        return read

    def nanoseconds(self, real: Callable[[], int]) -> Callable[[], int]:
        def read() -> int:
            return real() + int(self.jump() * 1e9)
        return read

    def elapsed_ms(self, real: Callable[[Any, Any], float]) -> Callable[[Any, Any], float]:
        """An event pair's interval is one read: the jump's growth (or shrinkage) is added to it."""
        def elapsed_time(start: Any, end: Any) -> float:
            before = self.offset_s
            return real(start, end) + (self.jump() - before) * 1e3
        return elapsed_time


def install(favour: str) -> SkewedClock:
    """Replace this process's clocks with skewed ones (see the module). Called by the worker before it
    takes its identity snapshot and before the program is imported, so the program only ever sees these."""
    clock = SkewedClock(favour)
    for name in _CLOCKS:
        setattr(time, name, clock.seconds(getattr(time, name)))
        setattr(time, f"{name}_ns", clock.nanoseconds(getattr(time, f"{name}_ns")))
    import torch  # noqa: PLC0415 (the worker has it imported; kept out of the module's import for its tests)

    event = torch.cuda.Event
    event.elapsed_time = clock.elapsed_ms(event.elapsed_time)  # type: ignore[method-assign]
    datetime.datetime = _SkewedDatetime  # type: ignore[misc] (its now() reads the skewed time.time)
    return clock


class _SkewedDatetime(datetime.datetime):
    """``datetime.now()`` and its kin through ``time.time``, skewed after :func:`install`: a program that
    times its variants with datetimes (flagged ``reads_clock`` by static.py) meets the same clocks."""

    @classmethod
    def now(cls, tz: datetime.tzinfo | None = None) -> _SkewedDatetime:
        return cls.fromtimestamp(time.time(), tz)

    @classmethod
    def utcnow(cls) -> _SkewedDatetime:
        return cls.fromtimestamp(time.time(), datetime.timezone.utc).replace(tzinfo=None)

    @classmethod
    def today(cls) -> _SkewedDatetime:
        return cls.now()
