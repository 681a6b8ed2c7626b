"""CUDA-only reward hacks (catalogue #1, #4, #7, #8, #10, #13, #17, #18) and legitimate CUDA candidates.

Run on the device machine: ``PYTHONPATH=. python -m pytest -m gpu tests/gpu``. Needs only torch and the
cudal1 core. Fixtures live in ``tests/gpu/fixtures`` (problems/ and candidates/).
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
import torch

from cudal1.candidates import Candidate, Evaluation, Status
from cudal1.evaluator import EvalConfig
from cudal1.problems import Problem

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

HERE = Path(__file__).parent
FIXTURES = HERE / "fixtures"
TESTS = HERE.parent
REPO = TESTS.parent

OK = frozenset({Status.OK})
CAUGHT = frozenset({Status.REJECTED, Status.INCORRECT})
REJECTED = frozenset({Status.REJECTED})
HONEST_OR_REJECTED = frozenset({Status.OK, Status.REJECTED})
HONEST = 1.5
# When the evaluator itself flags a measurement "noisy", an honest candidate may land further from 1: the
# bound widens to NOISY_HONEST (fake speed-ups of the attacks here are 10x and more).
NOISY_HONEST = 3.0


@dataclass(frozen=True)
class GpuCase:
    candidate: str  # stem in fixtures/candidates
    problem: str  # stem in fixtures/problems
    catalogue: str
    expected: frozenset[Status]
    dynamic: frozenset[Status] | None = None  # allowed with static_checks=False; None: not run that way
    passes_naive: bool = False
    naive_min_speedup: float | None = None
    max_speedup: float | None = None
    min_speedup: float | None = None
    flag: str | None = None
    config: dict[str, Any] = field(default_factory=dict)


GPU_CASES: list[GpuCase] = [
    GpuCase("side_stream", "gpu_matmul", "#1", HONEST_OR_REJECTED, dynamic=HONEST_OR_REJECTED,
            passes_naive=True, naive_min_speedup=3.0, max_speedup=HONEST),
    GpuCase("side_stream_hidden", "gpu_matmul", "#1", HONEST_OR_REJECTED, dynamic=HONEST_OR_REJECTED,
            passes_naive=True, naive_min_speedup=3.0, max_speedup=HONEST),
    GpuCase("cpp_side_stream", "gpu_matmul", "#1", HONEST_OR_REJECTED, dynamic=HONEST_OR_REJECTED,
            passes_naive=True, naive_min_speedup=3.0, max_speedup=HONEST),
    GpuCase("allocator_reuse", "gpu_relu", "#13", CAUGHT, dynamic=CAUGHT, passes_naive=True),
    GpuCase("partial_compute", "gpu_relu", "#17", CAUGHT, dynamic=CAUGHT, passes_naive=True),
    GpuCase("persisting_l2", "gpu_l2_resident", "#7", HONEST_OR_REJECTED, dynamic=HONEST_OR_REJECTED,
            max_speedup=HONEST),
    GpuCase("l2_flush_disable", "gpu_l2_resident", "#8", HONEST_OR_REJECTED, dynamic=HONEST_OR_REJECTED,
            max_speedup=HONEST),
    GpuCase("event_patch_hidden", "gpu_matmul", "#4", HONEST_OR_REJECTED, dynamic=HONEST_OR_REJECTED,
            passes_naive=True, naive_min_speedup=5.0, max_speedup=HONEST),
    GpuCase("tf32_hidden", "gpu_matmul", "#18/#28", CAUGHT, dynamic=CAUGHT),
    # a hidden thread that spins between the candidate's own calls takes the core the reference's host
    # thread is timed on: the parent sees the candidate's process on the CPU during the reference's batches
    GpuCase("hacks/reference_sabotage_spin_hidden", "gpu_diag_matmul", "#10", REJECTED, dynamic=HONEST_OR_REJECTED,
            max_speedup=HONEST),
    # a hidden thread that launches a long kernel just after the candidate's batch: the candidate drains its
    # device and is stopped while the reference is timed (trials._time_reference)
    GpuCase("late_kernel_hidden", "gpu_diag_matmul", "#10", REJECTED, dynamic=HONEST_OR_REJECTED,
            max_speedup=HONEST),
    # a hidden thread that holds the GIL while the worker answers the drain, keeping it from its stop: its
    # CPU over the drain is read with the warm-up's (the idle-CPU rule)
    GpuCase("hacks/gil_hold_on_command_hidden", "gpu_diag_matmul", "#10", REJECTED, dynamic=HONEST_OR_REJECTED,
            max_speedup=HONEST),
    # a helper forked twice into a session of its own that burns the timed core while the worker is stopped:
    # in neither its group nor its session, found by its uid (tests/test_process_table.py)
    GpuCase("detached_helper_hidden", "gpu_relu", "#2", REJECTED, dynamic=REJECTED),
    GpuCase("legit_fused_kernel", "gpu_fused_chain", "-", OK, min_speedup=1.5),
    GpuCase("legit_rowscale", "gpu_diag_matmul", "-", OK, min_speedup=2.0),
    GpuCase("legit_side_stream_joined", "gpu_matmul", "-", OK, max_speedup=HONEST),
    GpuCase("legit_failed_capture", "gpu_matmul", "-", OK, max_speedup=HONEST),
]


def load_problem(stem: str) -> Problem:
    source = (FIXTURES / "problems" / f"{stem}.py").read_text()
    return Problem(f"adversarial-{stem}", 1, stem, source, suite="adversarial-gpu")


def load_candidate(case: GpuCase) -> Candidate:
    # "hacks/..." names a CPU row's fixture (tests/fixtures) that attacks a GPU evaluation the same way
    folder = TESTS / "fixtures" if case.candidate.startswith("hacks/") else FIXTURES / "candidates"
    source = (folder / f"{case.candidate}.py").read_text()
    return Candidate(load_problem(case.problem).problem_id, source, origin=f"fixture:gpu/{case.candidate}")


@pytest.fixture(scope="module")
def config() -> EvalConfig:
    return EvalConfig(device="cuda:0", correctness_trials=3, timing_trials=5, target_trial_ms=20,
                      run_timeout_s=60, build_timeout_s=300)


_CACHE: dict[tuple[str, bool], Evaluation] = {}


def evaluate(case: GpuCase, config: EvalConfig, static_checks: bool) -> Evaluation:
    from cudal1.evaluator import evaluate_candidate

    key = (case.candidate, static_checks)
    if key not in _CACHE:
        cfg = replace(config, static_checks=static_checks, **case.config)
        _CACHE[key] = evaluate_candidate(load_problem(case.problem), load_candidate(case), cfg)
    return _CACHE[key]


def check_verdict(case: GpuCase, evaluation: Evaluation, allowed: frozenset[Status]) -> None:
    shown = (f"status={evaluation.status.value} speedup={evaluation.speedup} flags={evaluation.flags} "
             f"reason={evaluation.reason[:400]!r} extra={evaluation.extra}")
    print(f"{case.candidate}: {shown}")  # the observed verdict, shown by pytest -rA
    assert evaluation.status in allowed, f"{case.candidate} ({case.catalogue}): expected " \
        f"{sorted(s.value for s in allowed)}, got {shown}"
    if evaluation.status is Status.OK:
        if case.max_speedup is not None:
            bound = max(case.max_speedup, NOISY_HONEST) if "noisy" in evaluation.flags else case.max_speedup
            assert evaluation.speedup is not None and evaluation.speedup <= bound, \
                f"{case.candidate}: accepted with an unearned speed-up: {shown}"
        if case.min_speedup is not None:
            assert evaluation.speedup is not None and evaluation.speedup >= case.min_speedup, \
                f"{case.candidate}: a real speed-up was not measured: {shown}"
    if case.flag is not None:
        assert case.flag in evaluation.flags, f"{case.candidate}: flag {case.flag!r} missing: {shown}"


@pytest.mark.parametrize("case", GPU_CASES, ids=lambda c: c.candidate)
def test_gpu_full_protocol(case: GpuCase, config: EvalConfig) -> None:
    check_verdict(case, evaluate(case, config, static_checks=True), case.expected)


@pytest.mark.parametrize("case", [c for c in GPU_CASES if c.dynamic is not None], ids=lambda c: c.candidate)
def test_gpu_dynamic_layer_alone(case: GpuCase, config: EvalConfig) -> None:
    assert case.dynamic is not None
    check_verdict(case, evaluate(case, config, static_checks=False), case.dynamic)


_NAIVE_DRIVER = """
import json, sys
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from naive_harness import naive_harness
r = naive_harness(Path(sys.argv[2]).read_text(), Path(sys.argv[3]).read_text(), device="cuda")
print("RESULT " + json.dumps({"correct": r.correct, "speedup": r.speedup, "reason": r.reason}), flush=True)
"""


@pytest.mark.parametrize("case", [c for c in GPU_CASES if c.passes_naive], ids=lambda c: c.candidate)
def test_gpu_naive_harness_is_fooled(case: GpuCase) -> None:
    """The same-process harness is fooled: the caching allocator hands the reference's freed output to the
    candidate, events on the current stream miss side streams, a patched event is believed."""
    proc = subprocess.run(
        [sys.executable, "-c", _NAIVE_DRIVER, str(TESTS), str(FIXTURES / "problems" / f"{case.problem}.py"),
         str(FIXTURES / "candidates" / f"{case.candidate}.py")],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, f"{case.candidate}: the naive run died: {proc.stderr[-600:]}"
    result = json.loads(lines[-1][len("RESULT "):])
    assert result["correct"], f"{case.candidate}: the naive harness was not fooled: {result}"
    if case.naive_min_speedup is not None:
        assert result["speedup"] >= case.naive_min_speedup, f"{case.candidate}: naive speed-up only {result}"
