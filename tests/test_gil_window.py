"""benchmarks/gil_window.py measures a GIL-releasing call's lateness alone and beside a thread spinning in
Python, and leaves no thread behind."""

from __future__ import annotations

import threading

from scripts import load_script


def test_both_arms_are_measured_and_the_spinning_thread_is_gone() -> None:
    gil_window = load_script("gil_window")
    threads = threading.active_count()
    report = gil_window.measure(3)
    assert report["calls"] == 3 and report["switch_interval_ms"] > 0
    for arm in ("alone", "beside_spinning_thread"):
        assert report[arm]["max_ms"] >= report[arm]["median_ms"] > -gil_window.SLEEP_S * 1e3, report
    assert threading.active_count() == threads
