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
# tolerance_used): programs that passed at 0.77-0.96 of their limit failed other draws or other weights.
EDGE = 0.5
# Settings that were once fields of EvalConfig and are now fixed: kept in measurement_dict() with their
# values, so the config hash (the key of results files and resumable batches) is what it was.
_SETTLED: dict[str, Any] = {"clock": "host", "device_draws": True, "fast_core": 0, "quiet_candidate": True,
                            "recheck_early": True}


@dataclass(frozen=True)
class EvalConfig:
    """How a candidate is checked and timed (the evaluation protocol). Every field but the device and the
    bounds changes the config hash, so a batch re-run under another protocol never reuses measurements
    taken under this one. params.yaml sets these under each stage's ``protocol:``."""

    # Where both programs run: "cpu" or "cuda:N". A batch on several devices sets it per device; it is not
    # in the hash (each evaluation records the device's product name beside it).
    device: str = "cpu"

    # --- correctness

    # Correctness trials before timing, each on inputs drawn from a fresh seed the candidate cannot predict
    # (the second copies its inputs into the first trial's buffers: same addresses, new contents). More
    # trials catch rarer wrong outputs. At least 1.
    correctness_trials: int = 5
    # More correctness trials for a program that passed using more than half its tolerance (EDGE): a program
    # that fails one draw in five then fails at least one of 20 with 99% probability. 0: none.
    edge_trials: int = 15
    # Fresh sets of weights (a new init seed, new worker processes) under which a pass near its tolerance
    # (flag tolerance_edge) is checked again, correctness only; a failure under any is its verdict. Whether
    # such a program passes can depend on its weights, so more sets make its verdict repeat between runs.
    # 0: none.
    confirm_edge: int = 3
    # Confirmations of a pass by a program that reads the clock (flag reads_clock), in fresh processes under
    # clocks that make its first-timed, then its last-timed variant win its own timing race
    # (cudal1/evaluator/clock_skew.py): a program that would pick a wrong path on another host fails here.
    # 2 sees both ends of each race; 0 leaves the verdict to the first process.
    confirm_clock: int = 2
    # One tolerance for every output dtype, as atol = rtol (CUDA-L1 published at 1e-2); None: the per-dtype
    # ``tolerances``.
    tolerance: float | None = None
    # (atol, rtol) by output dtype, where ``tolerance`` is None (DEFAULT_TOLERANCES).
    tolerances: dict[str, tuple[float, float]] = field(default_factory=lambda: dict(DEFAULT_TOLERANCES))
    # Scale-aware check: ||out - ref|| / ||ref|| must stay under this, so zeros or a constant cannot pass
    # where the reference's values are smaller than atol. None: the larger of the dtype's atol and rtol.
    rel_l2_tolerance: float | None = None

    # --- timing

    # Time the programs after they pass; False gives verdicts of correctness only (no speedup).
    timing: bool = True
    # Untimed calls of each program before the calibration batch that sets the calls per trial (every
    # trial's batch has its own untimed call besides).
    warmup_iters: int = 3
    # Paired trials at least, the reference and the candidate in random order, each a batch of calls on
    # fresh inputs; the median of the trials' speedups is reported, with its 95% confidence interval.
    timing_trials: int = 5
    # Milliseconds a trial's batch should last: the calls per trial are set from the calibration batch to
    # about this, within min_iters..max_iters. Longer batches smooth a small kernel's noise and cost time.
    target_trial_ms: float = 40.0
    min_iters: int = 3  # the fewest calls in a trial's batch
    max_iters: int = 200  # the most calls in a trial's batch
    # After timing_trials, trials are added one at a time until the 95% confidence interval of the median
    # speedup lies within this relative half-width of it (0.02: within 2%), up to timing_trials *
    # (remeasure + 1) trials or max_timing_s of timing, whichever comes first. None: 2% on CUDA, 10% on a
    # CPU (a shared CPU's noise would only make a tighter target cost its ceiling every time).
    ci_target: float | None = None
    # Rounds of timing_trials the added trials may reach beyond the first (the ceiling above); 0: exactly
    # timing_trials trials.
    remeasure: int = 2
    # Seconds of timing after which no trial is added (the first timing_trials are always timed).
    max_timing_s: float = 5.0
    # An interval wider than this, relative to the median, is flagged "noisy" (the figure is still reported).
    max_spread: float = 0.15
    # Timed calls whose full outputs are compared to the reference's, chosen at random in each of
    # spot_check_trials random trials (every timed call is also fingerprinted and checked).
    spot_checks_per_trial: int = 1
    spot_check_trials: int = 2  # trials that get spot_checks_per_trial full comparisons
    # CUDA only: overwrite a buffer larger than the L2 cache before every timed call, so no call finds the
    # previous one's data cached. Off only to study cache effects.
    flush_l2: bool = True
    # Intra-op threads of both programs' processes, the same for each. At 1 on a CPU device each problem's
    # two workers share one core, so a busy neighbour slows both alike.
    cpu_threads: int = 1
    # A candidate whose own clock claims a saving the parent's wall clock around its batches did not see is
    # rejected: the excess must pass this share of the reference's timed work (and 5 ms, and the noise of
    # the untimed work), consistently, twice. Lower catches smaller forgeries and risks honest programs on a
    # busy host.
    wallclock_slack: float = 0.5
    # CUDA-L1's safeguard: a speedup above this is measured again, the candidate in a fresh process on the
    # same device, and rejected where the measurements do not agree (recheck_tolerance). None: no
    # re-measurement.
    recheck_above: float | None = 3.0
    # How far apart two measurements may lie and still agree: the faster one's interval may start at most
    # this share above the end of the slower one's. None: 5% on CUDA, 50% on a CPU.
    recheck_tolerance: float | None = None
    # Measurements at most, the first included: 2 is CUDA-L1's rule (reject on the first disagreement);
    # with 3 a third settles a disagreement, and the slowest agreeing figure is kept. At least 2.
    recheck_measurements: int = 3

    # --- bounds (not in the hash: they decide when to give up, not what is measured)

    # Seconds for a program's import and its extension builds (a cold CUDA build can take minutes).
    build_timeout_s: float = 600.0
    # Seconds for a worker's start, and for constructing the model after its build.
    load_timeout_s: float = 120.0
    # Seconds for one command: a correctness trial, a timed batch.
    run_timeout_s: float = 120.0
    # CPU device only: the address-space limit (RLIMIT_AS) of each worker, MB; 0: none. Not applied on CUDA,
    # whose context reserves a huge virtual address space.
    memory_limit_mb: int = 8192

    # --- static policy

    # Check each candidate's source before anything runs: a syntax error or a refused construct is settled
    # with no worker started. Off only to test the defences that run later.
    static_checks: bool = True
    # A reference whose output does not depend on its inputs (anything constant would pass): "flag" the
    # evaluation (degenerate_problem) or "reject" it.
    degenerate_policy: str = "flag"

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
