"""The evaluation protocol's knobs, in one frozen dataclass with documented defaults."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

# Default tolerance by output dtype: (atol, rtol). fp32 is strict so TF32/fp16 shortcuts inside an
# fp32 problem fail; half precisions get KernelBench's customary 1e-2.
DEFAULT_TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-6, 1e-6),
    "float32": (1e-4, 1e-4),
    "float16": (1e-2, 1e-2),
    "bfloat16": (1e-2, 1e-2),
}
# The strict float32 tolerance: at or below it a float32 problem must be computed in float32 (the
# evaluator rejects lowered precision, the reproduction's strict column uses it as atol = rtol).
STRICT_FLOAT32 = DEFAULT_TOLERANCES["float32"][0]
# A pass that used more than this share of its tolerance is flagged ``tolerance_edge`` (compare.Comparison's
# tolerance_used): L2-43's program passed twice at 0.77 and failed once on 3 of 262,144 elements
# (docs/gpu-runs.md#2026-11-25-h200-two-gpus); L2-27's passed at a relative L2 error of 0.92-0.96 of its
# limit and failed at 1.12-1.21 (docs/gpu-runs.md#2026-11-26-two-gpu-sample).
EDGE = 0.5
# Settings that were once fields of EvalConfig and are now fixed: kept in measurement_dict() with their
# values, so the config hash (the key of results files and resumable batches) is what it was.
_SETTLED: dict[str, Any] = {"clock": "host", "device_draws": True, "fast_core": 0, "quiet_candidate": True,
                             "recheck_early": True}


@dataclass(frozen=True)
class EvalConfig:
    """How a candidate is checked and timed. Every field changes the config hash, so a batch re-run
    with another protocol never reuses measurements taken under this one."""

    device: str = "cpu"  # "cpu" or "cuda:N"
    # --- correctness
    correctness_trials: int = 5  # fresh, unpredictable seeds each; one trial reuses the previous buffers
    edge_trials: int = 15  # more correctness trials for a program that passed using over EDGE of its tolerance
    # Fresh sets of weights (a new init seed, new processes) a pass near its tolerance (flag tolerance_edge)
    # must pass under too, correctness only (recheck.confirm). L2-27's error follows its weights: 0.87-0.97
    # of its limit in the runs it passed, 1.03-1.29 in those it failed, the same to 0.05% in a fresh process
    # on the same weights; 7 of 15 runs passed. At 3, a program like it is kept in about 5% of runs, so two
    # runs disagree on it about one time in ten, against one in two unconfirmed (docs/evaluator.md, "A pass
    # near its tolerance is confirmed"). 0: none.
    confirm_edge: int = 3
    # Confirmations of a pass by a program that reads the clock (flag reads_clock), in turn under clocks that
    # make its first-timed, then its last-timed variant win its own timing (clock_skew.py, recheck.confirm).
    # L1-13 returns float16 when its float16 path wins its race: 36 of 76 committed GPU evaluations passed,
    # and three more processes with true clocks mostly race as the first did (two runs of seven passed).
    # 2 sees both ends of each comparison it makes; 0 leaves the verdict to the first process.
    confirm_clock: int = 2
    tolerance: float | None = None  # overrides atol = rtol for every dtype (CUDA-L1 published: 1e-2)
    tolerances: dict[str, tuple[float, float]] = field(default_factory=lambda: dict(DEFAULT_TOLERANCES))
    # Scale-aware check: ||out - ref|| / ||ref|| must stay under this, so zeros or a constant cannot pass
    # when the reference's values are smaller than atol. None disables; default follows the tolerance.
    rel_l2_tolerance: float | None = None
    # --- timing
    timing: bool = True
    warmup_iters: int = 3
    timing_trials: int = 5  # paired reference/candidate trials in random order, at least; the median is reported
    target_trial_ms: float = 40.0  # calls per trial chosen so a trial lasts about this long; every call
    # gets inputs generated for it alone (on the device), so no cache of earlier contents can hit
    min_iters: int = 3
    max_iters: int = 200
    # Adaptive: after timing_trials, trials are added one at a time until the 95% confidence interval
    # of the median speedup lies within ci_target of it (relative half-width), up to
    # timing_trials * (remeasure + 1) trials or max_timing_s seconds of timing, whichever comes first.
    ci_target: float | None = None  # None: 2% on CUDA; 10% on a shared CPU, whose noise less would only chase
    remeasure: int = 2
    max_timing_s: float = 5.0
    max_spread: float = 0.15  # an interval wider than this (relative to the median) is flagged "noisy"
    spot_checks_per_trial: int = 1  # full outputs compared to the reference inside the timed loop...
    spot_check_trials: int = 2  # ...in this many randomly chosen trials (every call is fingerprinted anyway)
    flush_l2: bool = True  # CUDA only: overwrite a buffer larger than L2 before every timed call
    cpu_threads: int = 1  # intra-op threads for both processes on CPU (same for reference and candidate)
    # Reject when the candidate claims to save more time than the parent's own wall clock saw.
    wallclock_slack: float = 0.5
    # CUDA-L1's safeguard: a speedup above this is measured again, the candidate in a fresh process (on the
    # same device, which waits for it: see recheck.recheck) and rejected if the two disagree: here, when the
    # faster one's interval lies above the slower one's by more than recheck_tolerance (CUDA-L1 compared two
    # single figures).
    recheck_above: float | None = 3.0
    recheck_tolerance: float | None = None  # None: 5% beyond the intervals on CUDA, 50% on a shared CPU
    # Measurements at most: 2 is CUDA-L1's rule (reject on the first disagreement); with 3 a third one
    # settles a disagreement, and the slowest of them is kept.
    recheck_measurements: int = 3
    # --- bounds
    build_timeout_s: float = 600.0  # exec of the module plus its extension builds
    load_timeout_s: float = 120.0  # constructing ModelNew after the build
    run_timeout_s: float = 120.0  # one command (a correctness trial, a timing trial)
    memory_limit_mb: int = 8192  # CPU device only: RLIMIT_AS of a worker (CUDA needs a huge VA space)
    # --- static policy
    static_checks: bool = True
    degenerate_policy: str = "flag"  # "flag" or "reject": reference output constant across seeds

    def __post_init__(self) -> None:
        if not (self.device == "cpu" or self.device.startswith("cuda")):
            raise ValueError(f"device={self.device!r}: use 'cpu' or 'cuda:N'")
        for name in ("correctness_trials", "timing_trials", "min_iters", "max_iters"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)}: must be at least 1")
        if self.recheck_measurements < 2:
            raise ValueError(f"recheck_measurements={self.recheck_measurements}: must be at least 2 (the "
                             "first measurement and its re-measurement)")
        if self.ci_target is not None and not (0 < self.ci_target < 1):
            raise ValueError(f"ci_target={self.ci_target}: a relative half-width in (0, 1), e.g. 0.01")
        if self.edge_trials < 0:
            raise ValueError(f"edge_trials={self.edge_trials}: must be 0 (no more trials near the tolerance) or more")
        if self.confirm_clock < 0:
            raise ValueError(f"confirm_clock={self.confirm_clock}: must be 0 (none for a pass that reads the clock) "
                             "or more")
        if self.confirm_edge < 0:
            raise ValueError(f"confirm_edge={self.confirm_edge}: must be 0 (no fresh weights for a pass near "
                             "its tolerance) or more")
        if self.remeasure < 0 or self.max_timing_s <= 0:
            raise ValueError(f"remeasure={self.remeasure}, max_timing_s={self.max_timing_s}: remeasure >= 0 "
                             "and max_timing_s > 0")
        if self.min_iters > self.max_iters:
            raise ValueError(f"min_iters={self.min_iters} > max_iters={self.max_iters}: lower min_iters")
        if self.tolerance is not None and not (0 < self.tolerance < 1):
            raise ValueError(f"tolerance={self.tolerance}: pass a number in (0, 1), e.g. 1e-2")
        if self.degenerate_policy not in ("flag", "reject"):
            raise ValueError(f"degenerate_policy={self.degenerate_policy!r}: use 'flag' or 'reject'")
        for name in ("build_timeout_s", "load_timeout_s", "run_timeout_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}={getattr(self, name)}: must be positive seconds")

    def tolerance_for(self, dtype: str) -> tuple[float, float]:
        if self.tolerance is not None:
            return (self.tolerance, self.tolerance)
        return tuple(self.tolerances.get(dtype.replace("torch.", ""), (1e-4, 1e-4)))  # type: ignore[return-value]

    def rel_l2_for(self, dtype: str) -> float:
        if self.rel_l2_tolerance is not None:
            return self.rel_l2_tolerance
        return max(self.tolerance_for(dtype))

    @property
    def recheck_limit(self) -> float:
        if self.recheck_tolerance is not None:
            return self.recheck_tolerance
        return 0.05 if self.is_cuda else 0.50

    @property
    def interval_target(self) -> float:
        if self.ci_target is not None:
            return self.ci_target
        return 0.02 if self.is_cuda else 0.10

    @property
    def is_cuda(self) -> bool:
        return self.device.startswith("cuda")

    def measurement_dict(self) -> dict[str, Any]:
        """The fields that decide a measurement (bounds and the device index are excluded)."""
        skip = {"device", "build_timeout_s", "load_timeout_s", "run_timeout_s", "memory_limit_mb"}
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in skip} | _SETTLED

    @property
    def hash(self) -> str:
        payload = json.dumps(self.measurement_dict(), sort_keys=True, default=str)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    def with_device(self, device: str) -> EvalConfig:
        return replace(self, device=device)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
