"""One candidate against one problem: static -> build/load -> correctness -> timing -> verdict.

The reference runs in its own worker, which never executes candidate code; its outputs live only in
this (parent) process. The candidate runs in a second worker that sees inputs, never answers. Both
generate their inputs from seeds the parent sends; the parent checks the candidate's are bit-identical.
"""

from __future__ import annotations

import os
import random
import secrets
import shutil
import time
from collections.abc import Callable
from concurrent.futures import Future
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from cudal1.candidates import Candidate, Evaluation, Status
from cudal1.evaluator.bindings import binding_problems
from cudal1.evaluator.compare import compare_fingerprints, compare_outputs, inputs_unchanged, outputs_equal
from cudal1.evaluator.config import STRICT_FLOAT32, EvalConfig
from cudal1.evaluator.contention import external_wait_s, sample
from cudal1.evaluator.process import WorkerFailure, WorkerProcess
from cudal1.evaluator.static import check_source
from cudal1.evaluator.timing import (  # noqa: F401 - calls_per_trial re-exported: callers import it from core
    Measurement,
    TrialPair,
    calls_per_trial,
    forged_timing,
    trace_row,
)
from cudal1.evaluator.transport import TransportError
from cudal1.evaluator.workers import (  # noqa: F401 - re-exported: callers import these from core
    ReferenceError,
    ReferenceSession,
    compare_device,
    default_extensions_root,
    device_name,
    module_file,
    new_seed,
    prepare_candidate_worker,
    receive_payload,
)
from cudal1.problems import Problem

_rng = random.SystemRandom()  # seeds and orders the candidate cannot predict


class Verdict(Exception):
    """Ends an evaluation early with a status and a reason."""

    def __init__(self, status: Status, reason: str, **extra: Any) -> None:
        super().__init__(reason)
        self.status, self.reason, self.extra = status, reason, extra


def _check_precision(run: _Run) -> None:
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


def _check_reply(reply: dict[str, Any], what: str) -> dict[str, Any]:
    if not reply.get("ok"):
        kind = reply.get("kind", "runtime_error")
        raise Verdict(Status(kind), f"{what}: {reply.get('error', 'failed')}")
    return reply


def _check_integrity(reply: dict[str, Any], run: _Run) -> None:
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
    _check_precision(run)
    builds = reply.get("builds") or {}
    if builds.get("failed") or builds.get("cached_failures"):
        flags.add("extension_build_failed")  # its extension did not compile: its fallback path was measured
    strays = worker.stray_processes()
    if strays:
        raise Verdict(Status.REJECTED, f"left {len(strays)} process(es) running (forks or subprocesses)")
    problems = reply.get("problems") or []
    if problems:
        raise Verdict(Status.REJECTED, "; ".join(problems))


@dataclass
class _Run:
    problem: Problem
    candidate: Candidate
    config: EvalConfig
    reference: ReferenceSession
    worker: WorkerProcess
    flags: set[str] = field(default_factory=set)
    max_abs: float = 0.0
    max_rel: float = 0.0
    max_scaled: float = 0.0
    output_dtypes: list[str] = field(default_factory=list)
    lowered: list[str] = field(default_factory=list)  # float32 precision switches the program lowered
    # Per-trial timing details, kept when CUDAL1_TIMING_TRACE is set (diagnosing noise; off by default)
    trace: list[dict[str, Any]] | None = field(
        default_factory=lambda: [] if os.environ.get("CUDAL1_TIMING_TRACE") else None)


def _correctness(run: _Run) -> int:
    cfg = run.config
    seeds = [new_seed() for _ in range(max(cfg.correctness_trials, 2))]
    # One record at a time: a KernelBench record can hold 16 GB (L1-38/39: 8 GB in, 8 GB out), and the
    # parent holding several beside both workers' copies ran an 80 GB H100 out of memory
    # (docs/gpu-runs.md#2026-11-23-parent-oom).
    record = run.reference.records(seeds[:1])[0]
    run.output_dtypes = [str(o.dtype).replace("torch.", "") if isinstance(o, torch.Tensor) else "float64"
                         for o in record["outputs"]]
    _check_precision(run)  # switches lowered at load: only now is it known whether outputs are float32
    # Problem self-test: an output that does not depend on the inputs lets anything constant pass. The
    # second record is dropped after the test and fetched again for its trial (the reference is seeded).
    if outputs_equal(record["outputs"], run.reference.records(seeds[1:2])[0]["outputs"]):
        if cfg.degenerate_policy == "reject":
            raise Verdict(Status.REJECTED, "the reference's output does not depend on its inputs (degenerate problem)")
        run.flags.add("degenerate_problem")
    for k in range(cfg.correctness_trials):
        if k > 0:
            del record  # freed before the next one arrives
            record = run.reference.records([seeds[k]])[0]
        out_path = run.worker.workdir / f"outputs-{secrets.token_hex(8)}.pt"
        reply = run.worker.call({"cmd": "run", "seed": record["seed"], "out_path": str(out_path), "reuse": k == 1},
                                cfg.run_timeout_s)
        _check_reply(reply, f"correctness trial {k + 1}")
        _check_integrity(reply, run)
        payload = _candidate_payload(reply, out_path, run, f"correctness trial {k + 1}")
        if not isinstance(payload, dict) or not isinstance(payload.get("outputs"), list) \
                or not isinstance(payload.get("inputs_after"), list):
            raise Verdict(Status.RUNTIME_ERROR, f"correctness trial {k + 1}: the worker sent no outputs")
        # The worker generated its inputs from the seed itself: after the call they must still be the
        # reference's, bit for bit (neither generated differently nor modified in place).
        changed = inputs_unchanged(record["inputs"], payload["inputs_after"])
        if changed:
            raise Verdict(Status.REJECTED, changed)
        if reply.get("structure") != record["structure"] and len(record["outputs"]) > 1:
            raise Verdict(Status.INCORRECT, f"returns a {reply.get('structure')}, the reference a {record['structure']}")
        result = compare_outputs(record["outputs"], payload["outputs"], cfg)
        if not result.ok:
            raise Verdict(Status.INCORRECT, f"correctness trial {k + 1}{' (reused buffers)' if k == 1 else ''}: "
                          f"{result.reason}", max_abs_error=result.max_abs_error, max_rel_l2_error=result.max_rel_l2_error)
        run.max_abs = max(run.max_abs, result.max_abs_error)
        run.max_rel = max(run.max_rel, result.max_rel_l2_error)
        run.max_scaled = max(run.max_scaled, result.max_scaled_error)
        del payload
    return cfg.correctness_trials


def _warm_candidate(run: _Run, seed: int) -> None:
    reply = run.worker.call({"cmd": "warm", "seed": seed}, run.config.run_timeout_s)
    _check_reply(reply, "warm-up")
    _check_integrity(reply, run)


def _time_candidate(run: _Run, msg: dict[str, Any]) -> tuple[dict[str, Any], float, dict[str, Any]]:
    spot_path = run.worker.workdir / f"spot-{secrets.token_hex(8)}.pt"
    t0 = time.perf_counter()
    reply = run.worker.call(msg | {"spot_path": str(spot_path)}, run.config.run_timeout_s)
    wall = time.perf_counter() - t0
    _check_reply(reply, "timing")
    _check_integrity(reply, run)
    spots = _candidate_payload(reply, spot_path, run, "timing")
    return reply, wall, spots if isinstance(spots, dict) else {}


def _candidate_payload(reply: dict[str, Any], path: Path, run: _Run, what: str) -> Any:
    if reply.get("transport_fallback"):
        run.flags.add("file_transport")
    try:
        return receive_payload(reply, path, run.config, run.worker)
    except TransportError as exc:
        raise Verdict(Status.REJECTED, f"{what}: the worker's reply described tensors the harness cannot read "
                      f"({exc})") from exc


def _calibrate(run: _Run) -> int:
    cfg = run.config
    msg = {"cmd": "time", "warmup_seeds": [new_seed() for _ in range(cfg.warmup_iters)], "seeds": [new_seed(), new_seed()],
           "spot": [], "clock": cfg.clock}
    ref, _, _ = run.reference.time(msg)
    cand, _, _ = _time_candidate(run, msg)
    return calls_per_trial(cfg, [ref, cand])


def _trial(run: _Run, iters: int, spot_check: bool = True) -> TrialPair:
    """One paired trial: both programs get the same fresh seeds (one per call, never reused) and the
    same spot-check positions, unknown to the candidate; the order of the two is a coin flip."""
    cfg = run.config
    spot = sorted(_rng.sample(range(iters), min(cfg.spot_checks_per_trial, iters))) if spot_check else []
    # The warm-up call is a command of its own, so the parent's wall clock around the timed batch holds
    # only the timed calls plus work both programs share (input generation, L2 flush, fingerprints). With
    # the warm-up inside, a program that tunes itself on its first call of a batch (cudnn.benchmark on
    # L1-55/59/62/81 in docs/gpu-runs.md#2026-11-23-release-210) looked like a forged clock. Warming up early opens nothing: the timed
    # calls' inputs come from seeds sent only with the timing command.
    warm_seed = new_seed()
    msg = {"cmd": "time", "warmup_seeds": [], "seeds": [new_seed() for _ in range(iters)], "spot": spot,
           "print_key": new_seed(), "clock": cfg.clock}
    started = time.perf_counter()
    reference_first = _rng.random() < 0.5
    # On a shared CPU the parent reads how long each timed thread waited for a core (contention.py)
    watch = sample if not cfg.is_cuda else (lambda pid: None)

    def reference_side() -> tuple[dict[str, Any], float, dict[str, Any], float]:
        run.reference.warm(warm_seed)
        before = watch(run.reference.worker.pid)
        reply, wall, spots = run.reference.time(msg)
        return reply, wall, spots, external_wait_s(before, watch(run.reference.worker.pid))

    def candidate_side() -> tuple[dict[str, Any], float, dict[str, Any], float]:
        _warm_candidate(run, warm_seed)
        before = watch(run.worker.pid)
        reply, wall, spots = _time_candidate(run, msg)
        return reply, wall, spots, external_wait_s(before, watch(run.worker.pid))

    if reference_first:
        ref, ref_wall, ref_spots, ref_wait = reference_side()
        cand, cand_wall, cand_spots, cand_wait = candidate_side()
    else:
        cand, cand_wall, cand_spots, cand_wait = candidate_side()
        ref, ref_wall, ref_spots, ref_wait = reference_side()
    if run.trace is not None:
        run.trace.append(trace_row(ref, cand, ref_wall, cand_wall, reference_first, time.perf_counter() - started)
                         | {"ref_wait_ms": round(ref_wait * 1e3, 3), "cand_wait_ms": round(cand_wait * 1e3, 3)})
    ref_prints, cand_prints = ref.get("fingerprints", []), cand.get("fingerprints", [])
    if len(cand_prints) != len(ref_prints):
        raise Verdict(Status.REJECTED, "the timing reply lacks per-call output fingerprints")
    for index, (rp, cp) in enumerate(zip(ref_prints, cand_prints)):
        problem = compare_fingerprints(rp, cp, run.output_dtypes, cfg)
        if problem:
            raise Verdict(Status.INCORRECT, f"timed call {index + 1}: {problem} — the candidate behaves differently "
                          "once timed")
    for index in spot:
        outputs, expected = cand_spots.get(str(index)), ref_spots.get(str(index))
        if outputs is None or expected is None:
            raise Verdict(Status.RUNTIME_ERROR, f"no output recorded for timed call {index + 1}")
        result = compare_outputs(expected, outputs, cfg)
        if not result.ok:
            raise Verdict(Status.INCORRECT, f"output checked during timing (call {index + 1}) is wrong: "
                          f"{result.reason} — the candidate behaves differently once timed")
    return TrialPair(ref["ms"], cand["ms"], ref_wall, cand_wall, ref_wait, cand_wait)


def _pairs(run: _Run, iters: int, started: float) -> tuple[list[TrialPair], list[TrialPair]]:
    """Paired trials until the median speedup is known well enough: at least ``timing_trials``, then one
    more at a time while its confidence interval is wider than ``interval_target``, within the ceilings.
    Small or noisy kernels get more trials; a stable one stops at the minimum. A trial in which either
    program waited for a core held by another process (contention.py) is set aside and another one timed
    in its place, within the same ceilings; where the ceilings come first, the least contended of those
    set aside make up the number and the measurement is flagged "contended". Returns the pairs measured
    from and every pair timed."""
    cfg = run.config
    most = cfg.timing_trials * (cfg.remeasure + 1)
    checked = set(_rng.sample(range(cfg.timing_trials), min(cfg.spot_check_trials, cfg.timing_trials)))
    clean: list[TrialPair] = []
    contended: list[TrialPair] = []
    while True:
        pair = _trial(run, iters, len(clean) + len(contended) in checked)
        (contended if pair.contended else clean).append(pair)
        total = len(clean) + len(contended)
        spent = total >= most or (total >= cfg.timing_trials and time.perf_counter() - started > cfg.max_timing_s)
        if len(clean) >= cfg.timing_trials:
            if spent or Measurement.from_pairs(clean).half_width <= cfg.interval_target:
                return clean, clean + contended
        elif spent:
            run.flags.update(("contended", "noisy"))
            contended.sort(key=lambda p: p.wait_share)
            return clean + contended[:cfg.timing_trials - len(clean)], clean + contended


def _timing(run: _Run) -> tuple[Measurement, dict[str, Any]]:
    """Timed trials (see :func:`_pairs`), the wall-clock cross-check, the verdict on noise."""
    cfg = run.config
    started = time.perf_counter()
    iters = _calibrate(run)
    pairs, timed = _pairs(run, iters, started)
    best = Measurement.from_pairs(pairs)
    measurements = 1
    if forged_timing(pairs, cfg.wallclock_slack):
        # A forged clock is forged every time; a burst of load on the host (CI's 2-core machine ran an
        # honest C++ extension 15 ms a trial "slower" than it claimed) is not: reject only when a fresh
        # set of trials shows the discrepancy again, and report that set.
        run.flags.add("wallclock_rechecked")
        fresh = [_trial(run, iters) for _ in range(cfg.timing_trials)]
        forged = forged_timing(fresh, cfg.wallclock_slack)
        if forged:
            raise Verdict(Status.REJECTED, forged + " (twice, on two sets of trials)")
        best = Measurement.from_pairs(fresh)
        measurements = 2
    if best.high - best.low > cfg.max_spread * best.speedup:
        run.flags.add("noisy")
    # The timed batches' own share of the timing phase (the rest: warm-ups, messages, checks, spot copies)
    batches_s = sum(p.reference_wall_s + p.candidate_wall_s for p in timed)
    extra: dict[str, Any] = {"iters_per_trial": iters, "measurements": measurements, "batches_s": round(batches_s, 3),
                             "contended_trials": sum(p.contended for p in timed)}
    if run.trace is not None:
        extra["trace"] = run.trace
    return best, extra


def load_candidate(worker: WorkerProcess, init_seed: int, config: EvalConfig, *,
                   build_only: bool = False) -> dict[str, Any]:
    """Send a prepared candidate worker its load command (import, build, construct with the reference's
    init seed, move to the device); returns the reply. Raises WorkerFailure. ``build_only`` (a build
    worker's first step, on the CPU, whose only product is the build cache): no input plan or graph,
    which generate the problem's inputs four times over on one thread, and no torch.compile of a
    stand-in function to start inductor's threads before the snapshot (a C++ compile of ~10 s there,
    which no GPU worker can use). The GPU warm-up step loads as the timed worker does, so the caches the
    timed worker reads (the stand-in's included) are filled."""
    worker.wait_ready(config.load_timeout_s)
    return worker.call({"cmd": "load", "role": "candidate", "reference_path": str(worker.workdir / "reference.py"),
                        "candidate_path": str(worker.workdir / "candidate.py"), "init_seed": init_seed,
                        "module_file": module_file(worker), "graph_inputs": config.graph_inputs,
                        "build_only": build_only},  # no plan, so no graph either
                       config.build_timeout_s + config.load_timeout_s)


def evaluate_candidate(
    problem: Problem,
    candidate: Candidate,
    config: EvalConfig,
    *,
    reference: ReferenceSession | None = None,
    extensions_root: Path | None = None,
    prepared: WorkerProcess | None = None,
    loaded: Future[dict[str, Any]] | None = None,
    quiet: Callable[[], AbstractContextManager[Any]] | None = None,
) -> Evaluation:
    """Evaluate one candidate. Never raises for anything the candidate does; raises ``ReferenceError``
    only when the problem's own reference cannot run. A batch passes a ``prepared`` worker, the
    ``loaded`` reply of its load command when that already ran (see :func:`load_candidate`), and
    ``quiet``, a context the timing runs inside: entered once nothing else of the batch uses the device
    or the CPU cores (loads done, builds paused)."""
    started = time.perf_counter()
    base = Evaluation(problem.problem_id, candidate.candidate_id, Status.OK, device=config.device,
                      device_name=device_name(config.device), config_hash=config.hash,
                      problem_sha256=problem.sha256, candidate_sha256=candidate.sha256)
    static_flags: tuple[str, ...] = ()
    if config.static_checks:
        report = check_source(candidate.source)
        if report.syntax_error or report.rejected:
            if prepared is not None:
                prepared.close()
                shutil.rmtree(prepared.workdir.parent, ignore_errors=True)
            status = Status.COMPILE_ERROR if report.syntax_error else Status.REJECTED
            return replace(base, status=status, reason=report.reason, flags=report.flags,
                           eval_s=time.perf_counter() - started)
        static_flags = report.flags
    own_reference = reference is None
    reference = reference or ReferenceSession(problem, config)
    worker = prepared or prepare_candidate_worker(problem, candidate, config, extensions_root)
    root = worker.workdir.parent
    run = _Run(problem, candidate, config, reference, worker, set(static_flags))
    result = base
    build_error = ""
    try:
        reply = loaded.result() if loaded is not None else load_candidate(worker, reference.init_seed, config)
        _check_reply(reply, "load")
        _check_integrity(reply, run)
        if reply.get("graphed") and reference.graphed:
            run.flags.add("graphed_inputs")  # both programs timed on inputs from the captured graph
        result = replace(result, build_s=reply.get("build_s"))
        build_error = (reply.get("builds") or {}).get("first_error")
        phase = time.perf_counter()
        trials = _correctness(run)
        result = replace(result, correctness_trials=trials, max_abs_error=run.max_abs, max_rel_l2_error=run.max_rel,
                         extra={"max_scaled_error": run.max_scaled,
                                "load_s": round(phase - started, 3), "correctness_s": round(time.perf_counter() - phase, 3)})
        if config.timing:
            phase = time.perf_counter()
            with quiet() if quiet is not None else nullcontext() as waited_for:
                # The wait for the loads running ahead (a neighbour's work, see schedule.quiet_after) is
                # booked apart, so a slow neighbour does not show up as this candidate's timing.
                waited = time.perf_counter() - phase
                measured, extra = _timing(run)
            if waited >= 1.0 and waited_for:  # a label from schedule.quiet_after; None without a batch
                extra["waited_for"] = waited_for
            extra["timing_s"] = round(time.perf_counter() - phase - waited, 3)
            extra["wait_s"] = round(waited, 3)
            result = replace(result, speedup=measured.speedup, speedup_low=measured.low,
                             speedup_high=measured.high, reference_ms=measured.reference_ms,
                             candidate_ms=measured.candidate_ms, spread=measured.spread, trials=measured.trials,
                             extra=result.extra | extra)
    except Verdict as verdict:
        result = replace(result, status=verdict.status, reason=verdict.reason, speedup=None, speedup_low=None,
                         speedup_high=None,
                         **{k: v for k, v in verdict.extra.items() if k in ("max_abs_error", "max_rel_l2_error")})
    except WorkerFailure as failure:
        result = replace(result, status=Status(failure.kind), reason=failure.message, speedup=None,
                         speedup_low=None, speedup_high=None)
    finally:
        worker.close()
        shutil.rmtree(root, ignore_errors=True)
        if own_reference:
            reference.close()
    if build_error:  # the compiler's words: whether the program or the machine's toolchain is at fault
        result = replace(result, extra=result.extra | {"build_error": build_error})
    fault = binding_problems(candidate.source) if "extension_build_failed" in run.flags else []
    if fault:  # the program's own load_inline cannot build anywhere: not this machine's toolchain
        result = replace(result, extra=result.extra | {"build_fault": "; ".join(fault)[:600]})
    return replace(result, flags=tuple(sorted(run.flags)), eval_s=time.perf_counter() - started)


