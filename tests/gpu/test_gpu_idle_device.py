"""The reference's wait for an idle device (cudal1/evaluator/timed.py, IdleDevice) on a real GPU. With nothing
else on the device its probe answers within a few tens of microseconds; with another process's kernels
on it, a probe waits for a time slice and the wait lasts until they are done; an honest evaluation never
waits. Each test prints the probe's answers, the figures its thresholds rest on (run with ``-s``).

Run on the device machine: ``PYTHONPATH=. python -m pytest -m gpu tests/gpu/test_gpu_idle_device.py -s``.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from cudal1.candidates import Candidate, Status
from cudal1.evaluator import EvalConfig, evaluate_candidate
from cudal1.evaluator.timed import BUSY_MS, FLOOR_US, IdleDevice
from cudal1.problems import Problem

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

# Another process that holds the device: it brings its context up, waits for a line, then queues four
# spin kernels of about 0.1 s each (2e8 cycles at 1.98 GHz) and waits for them.
NEIGHBOUR = """
import sys, torch
torch.zeros(1, device="cuda:0")
torch.cuda.synchronize()
print("ready", flush=True)
sys.stdin.readline()
for _ in range(4):
    torch.cuda._sleep(200_000_000)
print("queued", flush=True)
torch.cuda.synchronize()
"""


def _answers(idle: IdleDevice, n: int) -> list[float]:
    return [idle.probe_us() for _ in range(n)]


def _shown(answers: list[float]) -> str:
    ordered = sorted(answers)
    return (f"median {statistics.median(ordered):.1f} us, p90 {ordered[int(0.9 * (len(ordered) - 1))]:.1f} us, "
            f"max {ordered[-1]:.1f} us over {len(ordered)}")


def test_an_idle_device_answers_at_once() -> None:
    idle = IdleDevice(torch.device("cuda:0"), torch.cuda.synchronize)
    answers = _answers(idle, 200)
    settled = idle.settle()
    print(f"idle device: {_shown(answers)}; threshold {idle.threshold_us():.0f} us; settle {settled}")
    assert statistics.median(answers) < FLOOR_US, _shown(answers)
    assert settled["device_probes"] == 2 and settled["device_wait_ms"] < BUSY_MS, settled


def test_another_process_kernels_keep_the_device_busy_until_they_are_done() -> None:
    idle = IdleDevice(torch.device("cuda:0"), torch.cuda.synchronize)
    _answers(idle, 20)  # its floor is the idle device's
    neighbour = subprocess.Popen([sys.executable, "-c", NEIGHBOUR], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 text=True)
    try:
        assert neighbour.stdout is not None and neighbour.stdin is not None
        assert neighbour.stdout.readline().strip() == "ready"
        neighbour.stdin.write("go\n")
        neighbour.stdin.flush()
        assert neighbour.stdout.readline().strip() == "queued"
        t0 = time.perf_counter()
        busy = _answers(idle, 5)
        settled = idle.settle(limit_s=5.0)
        waited = time.perf_counter() - t0
    finally:
        neighbour.wait(timeout=60)
    print(f"device busy with another process's kernels: {_shown(busy)}; threshold {idle.threshold_us():.0f} us; "
          f"settle {settled}; {waited * 1e3:.0f} ms in all")
    # The premise: a probe waits for a time slice while another context's kernel holds the device
    assert min(busy) > idle.threshold_us(), _shown(busy)
    # and waits until the neighbour's 0.4 s of kernels are done (2026-11-28, H200: 392.8 ms, 168 probes)
    assert not settled["device_busy"] and settled["device_wait_ms"] > max(300.0, BUSY_MS), settled


def test_an_honest_evaluation_waits_for_no_device() -> None:
    """The reference against itself: the candidate's worker drained its device before it stopped, so the
    reference's worker finds it idle before every batch."""
    source = (Path(__file__).parent / "fixtures" / "problems" / "gpu_diag_matmul.py").read_text()
    problem = Problem("idle-gpu_diag_matmul", 1, "gpu_diag_matmul", source, suite="adversarial-gpu")
    config = EvalConfig(device="cuda:0", correctness_trials=3, timing_trials=5, target_trial_ms=20, run_timeout_s=60)
    control = Candidate(problem.problem_id, source.replace("class Model(", "class ModelNew("), origin="control")
    evaluation = evaluate_candidate(problem, control, config)
    print(f"honest evaluation: {evaluation.status.value} {evaluation.speedup} device_wait_ms "
          f"{evaluation.extra.get('device_wait_ms')}")
    assert evaluation.status is Status.OK, evaluation.reason
    assert 0 < evaluation.extra["device_wait_ms"] < BUSY_MS, evaluation.extra
