"""references.CLOSER: within a batch a worker's close runs beside the device loop, the next timing on that
device waits for it (schedule.quiet_after), and no close outlives the batch; outside one, a close is made
where it is asked for."""

from __future__ import annotations

import time

from cudal1.evaluator.references import Closer
from cudal1.evaluator.schedule import quiet_after


def _slow(done: list[str], name: str, seconds: float = 0.3):
    def close() -> None:
        time.sleep(seconds)
        done.append(name)
    return close


def test_outside_a_batch_a_close_is_made_at_once() -> None:
    closer, done = Closer(), []
    closer.close("cpu", _slow(done, "a", 0.05))
    assert done == ["a"]
    assert closer.wait("cpu") is False  # nothing in flight


def test_within_a_batch_a_close_runs_beside_and_the_batch_ends_after_it() -> None:
    closer, done = Closer(), []
    with closer.active():
        t0 = time.perf_counter()
        closer.close("cuda:0", _slow(done, "a"))
        closer.close("cuda:1", _slow(done, "b", 2.0))  # still running after "a", even on a loaded machine
        assert time.perf_counter() - t0 < 0.2 and done == []  # the caller goes on at once
        assert closer.wait("cpu") is False  # another device's closes are not waited for
        assert closer.wait("cuda:0") is True and "a" in done  # this device's are
        assert "b" not in done
    assert sorted(done) == ["a", "b"]  # none outlives the batch
    assert closer.pool is None


def test_a_failing_close_does_not_stop_the_batch() -> None:
    closer, done = Closer(), []

    def broken() -> None:
        raise OSError("gone already")

    with closer.active():
        closer.close("cpu", broken)
        closer.close("cpu", _slow(done, "after", 0.01))
    assert done == ["after"]


def test_timing_waits_for_its_devices_closes(monkeypatch) -> None:
    """quiet_after's context is entered only once the device's workers have exited, and names that wait."""
    from cudal1.evaluator import schedule

    closer, done = Closer(), []
    monkeypatch.setattr(schedule, "CLOSER", closer)
    with closer.active():
        closer.close("cuda:0", _slow(done, "a"))
        t0 = time.perf_counter()
        with quiet_after([], "cuda:0")() as waited_for:
            assert done == ["a"] and time.perf_counter() - t0 >= 0.25
            assert waited_for == "workers closing"
        with quiet_after([], "cuda:0")() as waited_for:
            assert waited_for is None  # nothing left to wait for
