"""benchmarks/parent_load.py: whether the evaluating parent, which drives every device from threads of one
interpreter, was saturated during a run; and where each device's timed core sits."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from scripts import load_script


def _spin(stop: threading.Event) -> None:
    while not stop.is_set():  # pure Python: holds the interpreter lock but for the switch interval
        sum(range(200))


def test_the_probe_reads_a_thread_that_holds_the_interpreter_lock() -> None:
    load = load_script("parent_load")
    with load.ParentLoad() as idle:
        time.sleep(0.4)
    stop = threading.Event()
    spinner = threading.Thread(target=_spin, args=(stop,), name="spinner-1")
    spinner.start()
    try:
        with load.ParentLoad() as busy:
            time.sleep(0.6)
    finally:
        stop.set()
        spinner.join()
    quiet, loaded = idle.summary(), busy.summary()
    # beside a spinning thread each wake-up waits for the lock (up to the 5 ms switch interval)
    assert loaded["late_ms"]["median"] >= 1.0
    assert loaded["late_ms"]["median"] > 3 * quiet["late_ms"]["median"]
    assert loaded["late_share"] > quiet["late_share"]
    # and the process used about a core (alone; the suite's other workers share the CI machine's two cores)
    assert loaded["cpu_share"] > 0.3 > quiet["cpu_share"]
    assert loaded["wakeups"] > 20
    # and that core went to the spinning thread, named by its group
    assert loaded["threads_cpu_s"].get("spinner", 0.0) > 0.2
    assert "spinner" not in quiet["threads_cpu_s"]


def test_each_gpu_gets_its_timed_core_and_that_cores_siblings(monkeypatch: pytest.MonkeyPatch) -> None:
    load = load_script("parent_load")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(32)))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    cores = load.timed_cores(["cuda:0", "cuda:1", "cpu"])
    assert {d: c["core"] for d, c in cores.items()} == {"cuda:0": 31, "cuda:1": 30}  # cores.timed_core's pair
    assert all(isinstance(c["siblings"], str) for c in cores.values())
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert load.timed_cores(["cuda:0"]) == {}  # too few cores to give one away: left to the scheduler


def test_the_host_record_reads_a_busy_core_and_the_time_it_was_taken() -> None:
    """A process spinning on core 0 for the whole run shows as about one busy core, and core 0 (watched) as
    busy nearly all the time; steal and the clock are read as /proc gives them."""
    load = load_script("parent_load")
    spin = "import os, time\nos.sched_setaffinity(0, {0})\nt = time.time()\nwhile time.time() - t < 3: pass"
    spinner = subprocess.Popen([sys.executable, "-c", spin])
    try:
        time.sleep(0.3)  # pinned and spinning before the run starts
        with load.ParentLoad(watch=[0]) as busy:
            time.sleep(1.5)
    finally:
        spinner.kill()
        spinner.wait()
    host = busy.summary()["host"]
    assert host["busy_cores"]["mean"] >= 0.8 and host["busy_cores"]["p90"] >= host["busy_cores"]["mean"] * 0.9
    assert host["watched"][0]["busy_share"] >= 0.8
    assert 0.0 <= host["steal_share"] < 0.5
    assert host.get("mhz_median", 1.0) > 0  # /proc/cpuinfo's clock where it gives one
    assert 0 in load.cpu_jiffies() and all(busy <= total for busy, total, _ in load.cpu_jiffies().values())


def _waits_in_a_named_function(stop: threading.Event) -> None:
    while not stop.is_set():
        time.sleep(0.001)


def test_the_stack_sampler_finds_where_a_device_loop_spends_its_time() -> None:
    """With ``stacks`` on, each wake-up reads where every device loop's thread is (its innermost frame, and
    its chain of the project's own frames), and reads the host's processes as the stray check does."""
    load = load_script("parent_load")
    stop = threading.Event()
    loop = threading.Thread(target=_waits_in_a_named_function, args=(stop,), name="cudal1-eval-cuda:0")
    other = threading.Thread(target=_waits_in_a_named_function, args=(stop,), name="not-a-device-loop")
    loop.start()
    other.start()
    try:
        with load.ParentLoad(stacks=True) as sampled:
            time.sleep(1.3)  # past THREADS_EVERY wake-ups: one reading of the host's processes
    finally:
        stop.set()
        loop.join()
        other.join()
    stacks = sampled.summary()["stacks"]
    assert stacks["samples"] > 50  # the device loop only: the other thread is not sampled
    assert stacks["samples"] <= sampled.summary()["wakeups"]
    assert stacks["leaves"]["test_parent_load.py:_waits_in_a_named_function"] > 0.9
    procs = sampled.summary()["host_processes"]
    assert procs["median"] >= 1 and procs["scan_ms_median"] > 0
    with load.ParentLoad() as plain:
        time.sleep(0.05)
    assert "stacks" not in plain.summary()


def test_the_stacks_table_reads_the_committed_runs() -> None:
    """benchmarks/stacks_table.py on the runs of docs/gpu-runs.md#2026-11-30-parent-stacks: closing workers and
    the stray check's reads, a seventh of the device loop before, a few percent after."""
    table = load_script("stacks_table")
    runs = Path(__file__).resolve().parents[1] / "docs" / "benchmarks" / "parent-stacks-h200"
    before, after = table.line(runs / "before" / "warm"), table.line(runs / "after" / "warm1")
    assert before["closing"] == 0.0945 and before["stray_scan"] == 0.0516
    assert after["closing"] < 0.005 and after["stray_scan"] < 0.015
    assert before["processes"] == 198 and before["wall_less_rechecks_s"] == 69.2
