"""One evaluation's state and the checks every reply of its candidate worker goes through: a
``Verdict`` ends the evaluation with a status and a reason."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cudal1.candidates import Candidate, Status
from cudal1.evaluator.config import STRICT_FLOAT32, EvalConfig
from cudal1.evaluator.process import WorkerProcess
from cudal1.evaluator.references import ReferenceSession
from cudal1.evaluator.transport import TransportError
from cudal1.evaluator.workers import receive_payload
from cudal1.problems import Problem


@dataclass
class Run:
    """One evaluation in progress: its two workers and what the checks have found so far."""

    problem: Problem
    candidate: Candidate
    config: EvalConfig
    reference: ReferenceSession
    worker: WorkerProcess
    flags: set[str] = field(default_factory=set)
    max_abs: float = 0.0
    max_rel: float = 0.0
    max_scaled: float = 0.0
    tolerance_used: float = 0.0  # the largest share of its tolerance the output used (compare.Comparison)
    output_dtypes: list[str] = field(default_factory=list)
    lowered: list[str] = field(default_factory=list)  # float32 precision switches the program lowered
    device_draws: bool = False  # both workers draw timed inputs with the harness's kernels (device_draws.py)
    warmed: bool = False  # its first call was made while loading ahead (core.load_candidate's first_call)
    # A re-measurement's earlier measurements, (speedup, low, high) each: its trials stop once its interval
    # agrees with one of them (trials._pairs); empty for a first measurement
    agree_with: tuple[tuple[float, float, float], ...] = ()
    # Shares of the window the candidate's process spent on the CPU while idle (the reference's warm-up, and
    # its batch where the candidate was not stopped), for the trials over the limit (trials._check_idle)
    idle_work: list[float] = field(default_factory=list)
    # each trial's wait for the device, where the candidate's stopped process kept it busy (timed.IdleDevice)
    device_waits: list[float] = field(default_factory=list)
    # Per-trial timing details, kept when CUDAL1_TIMING_TRACE is set (diagnosing noise; off by default)
    trace: list[dict[str, Any]] | None = field(
        default_factory=lambda: [] if os.environ.get("CUDAL1_TIMING_TRACE") else None)


class Verdict(Exception):
    """Ends an evaluation early with a status and a reason."""

    def __init__(self, status: Status, reason: str, **extra: Any) -> None:
        super().__init__(reason)
        self.status, self.reason, self.extra = status, reason, extra


def check_precision(run: Run) -> None:
    """Under the strict float32 tolerance a problem with float32 outputs is a float32 problem: a program
    that lowers float32 precision for the process (TF32, bfloat16 matmuls) is rejected, whatever its
    outputs. On a CPU with bfloat16 units such a program passed 1e-4 and timed 2.3x faster
    (tests/test_adversarial.py, backend_flag_hidden). Under a looser tolerance (CUDA-L1's 1e-2, where
    TF32 is its programs' own practice) it is flagged, and the reproduction's strict column rejects it."""
    if not run.lowered or "float32" not in run.output_dtypes:
        return
    if run.config.tolerance_for("float32")[0] <= STRICT_FLOAT32:
        raise Verdict(Status.REJECTED, "lowered float32 precision under the strict float32 tolerance: "
                      + "; ".join(run.lowered))
    run.flags.add("precision_lowered")


def check_reply(reply: dict[str, Any], what: str) -> dict[str, Any]:
    if not reply.get("ok"):
        kind = reply.get("kind", "runtime_error")
        raise Verdict(Status(kind), f"{what}: {reply.get('error', 'failed')}")
    return reply


def check_integrity(reply: dict[str, Any], run: Run) -> None:
    worker, flags = run.worker, run.flags
    violations = reply.get("violations") or {}
    if violations.get("patched"):
        raise Verdict(Status.REJECTED, "replaced harness functions: " + ", ".join(violations["patched"]))
    if violations.get("changed"):
        raise Verdict(Status.REJECTED, "changed global state: " + "; ".join(violations["changed"]))
    if violations.get("precision"):
        flags.add("precision_flags")
    if violations.get("lowered"):
        run.lowered = violations["lowered"]
    check_precision(run)
    builds = reply.get("builds") or {}
    if builds.get("failed") or builds.get("cached_failures"):
        flags.add("extension_build_failed")  # its extension did not compile: its fallback path was measured
    strays = worker.stray_processes()
    if strays:
        raise Verdict(Status.REJECTED, f"left {len(strays)} process(es) running (forks or subprocesses)")
    problems = reply.get("problems") or []
    if problems:
        raise Verdict(Status.REJECTED, "; ".join(problems))


def candidate_payload(reply: dict[str, Any], path: Path, run: Run, what: str) -> Any:
    if reply.get("transport_fallback"):
        run.flags.add("file_transport")
    try:
        return receive_payload(reply, path, run.config, run.worker)
    except TransportError as exc:
        raise Verdict(Status.REJECTED, f"{what}: the worker's reply described tensors the harness cannot read "
                      f"({exc})") from exc
