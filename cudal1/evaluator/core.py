"""One candidate against one problem: static -> build/load -> correctness -> timing -> verdict.

The reference runs in its own worker, which never executes candidate code; its outputs live only in
this (parent) process. The candidate runs in a second worker that sees inputs, never answers. Both
generate their inputs from seeds the parent sends; the parent checks the candidate's are bit-identical.
"""

from __future__ import annotations

import secrets
import shutil
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from cudal1.candidates import HARNESS_FAILED, Candidate, Evaluation, Status
from cudal1.evaluator import sandbox
from cudal1.evaluator.bindings import binding_problems
from cudal1.evaluator.checks import (
    Run,
    Verdict,
    candidate_payload,
    check_integrity,
    check_precision,
    check_reply,
)
from cudal1.evaluator.compare import compare_outputs, inputs_unchanged, outputs_equal
from cudal1.evaluator.config import EDGE, EvalConfig
from cudal1.evaluator.process import WorkerFailure, WorkerProcess
from cudal1.evaluator.references import ReferenceSession, close_worker
from cudal1.evaluator.static import STATIC_KEY, tunes_itself
from cudal1.evaluator.static import summary as static_summary
from cudal1.evaluator.timing import calls_per_trial  # noqa: F401 - re-exported: callers import it from core
from cudal1.evaluator.trials import measure
from cudal1.evaluator.workers import device_name, draws_path, module_file, new_seed, prepare_candidate_worker
from cudal1.problems import Problem

# A reference record up to this size is fetched one trial ahead, while the candidate runs the trial before,
# so the two workers run at once; a larger one comes when its trial does (see _correctness).
RECORD_AHEAD_BYTES = 2 << 30


def _record_bytes(record: dict[str, Any]) -> int:
    return sum(t.numel() * t.element_size() for t in (*record["inputs"], *record["outputs"])
               if isinstance(t, torch.Tensor))


def _correctness(run: Run) -> int:
    cfg = run.config
    seeds = [new_seed() for _ in range(max(cfg.correctness_trials, 2))]
    # One record at a time when records are large: a KernelBench record can hold 16 GB (L1-38/39: 8 GB in,
    # 8 GB out), and the parent holding several beside both workers' copies ran an 80 GB H100 out of memory.
    # Small ones (RECORD_AHEAD_BYTES) come a trial ahead.
    if run.reference.stateful:
        # The output depends on earlier calls (an RNN's hidden state kept in self): the reference starts
        # fresh, as the candidate's new worker does, and each of its records is one call, in trial order.
        run.reference.reset()
        run.flags.add("stateful_reference")
        if run.warmed:  # the candidate's warm-up call ahead moved its state on: built again, as fresh
            check_reply(run.worker.call({"cmd": "reset"}, cfg.build_timeout_s), "reset")
    record = run.reference.records(seeds[:1])[0]
    small = _record_bytes(record) <= RECORD_AHEAD_BYTES
    run.output_dtypes = [str(o.dtype).replace("torch.", "") if isinstance(o, torch.Tensor) else "float64"
                         for o in record["outputs"]]
    check_precision(run)  # switches lowered at load: only now is it known whether outputs are float32
    # Problem self-test: an output that does not depend on the inputs lets anything constant pass. The
    # second record is kept for its trial when small, dropped and fetched again otherwise (the reference
    # is seeded).
    def fetch(seed: int) -> dict[str, Any]:
        return run.reference.records([seed])[0]

    coming: Future[dict[str, Any]] | None = None  # the next trial's record, when it is on its way or here
    if not run.reference.stateful:
        second = fetch(seeds[1])
        if outputs_equal(record["outputs"], second["outputs"]):
            if cfg.degenerate_policy == "reject":
                raise Verdict(Status.REJECTED, "the reference's output does not depend on its inputs (degenerate problem)")
            run.flags.add("degenerate_problem")
        if small:
            coming = Future()
            coming.set_result(second)
        del second
    # Exits (a verdict included) wait for a record in flight: the reference worker is the batch's, and its
    # next user must find it idle.
    total = cfg.correctness_trials
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="cudal1-records") as pool:
        k = 0
        while k < total:
            if k > 0:
                del record  # freed before the next one arrives (unless it came ahead)
                record = coming.result() if coming is not None else fetch(seeds[k])
                coming = None
            if small and coming is None and k + 1 < total:
                coming = pool.submit(fetch, seeds[k + 1])
            _candidate_trial(run, record, k)
            k += 1
            if k == cfg.correctness_trials and run.tolerance_used > EDGE and cfg.edge_trials:
                # Passed near its tolerance: another draw of inputs may fail it, so its verdict would not
                # repeat between runs (L2-27 and L2-43 changed verdict between the release's cold and warm
                # runs). More draws decide it: a program
                # that fails one draw in five fails at least one of twenty with 99% probability.
                total += cfg.edge_trials
                seeds += [new_seed() for _ in range(cfg.edge_trials)]
    if run.tolerance_used > EDGE:
        run.flags.add("tolerance_edge")  # passed, but near its tolerance (after the edge trials too)
    return total


def _candidate_trial(run: Run, record: dict[str, Any], k: int) -> None:
    """The candidate's correctness trial ``k`` on the seed of the reference's ``record``; raises Verdict."""
    cfg = run.config
    out_path = run.worker.workdir / f"outputs-{secrets.token_hex(8)}.pt"
    reply = run.worker.call({"cmd": "run", "seed": record["seed"], "out_path": str(out_path), "reuse": k == 1},
                            cfg.run_timeout_s)
    check_reply(reply, f"correctness trial {k + 1}")
    check_integrity(reply, run)
    payload = candidate_payload(reply, out_path, run, f"correctness trial {k + 1}")
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
    run.tolerance_used = max(run.tolerance_used, result.tolerance_used)
    del payload


def load_candidate(worker: WorkerProcess, init_seed: int, config: EvalConfig, *,
                   build_only: bool = False, first_call: bool = False, clock_skew: str | None = None) -> dict[str, Any]:
    """Send a prepared candidate worker its load command (import, build, construct with the reference's
    init seed, move to the device); returns the reply. Raises WorkerFailure. ``build_only`` (a build
    worker's first step, on the CPU, whose only product is the build cache): no input plan or graph,
    which generate the problem's inputs four times over on one thread, and no torch.compile of a
    stand-in function to start inductor's threads before the snapshot (a C++ compile of ~10 s there,
    which no GPU worker can use). The GPU warm-up step loads as the timed worker does, so the caches the
    timed worker reads (the stand-in's included) are filled.

    ``first_call`` (a batch's loads ahead): the program is then called once on
    fresh inputs, nothing sent back, so what its first call costs (CUDA's lazy kernel loading, a cached
    torch.compile's tracing, library handles) is paid while another candidate is checked instead of in
    this one's first correctness trial. A failure of that call is the load's: a program that cannot
    survive its first call is not let off by a warm-up. ``first_call_s`` in the reply says it ran."""
    t0 = time.perf_counter()
    try:
        worker.wait_ready(config.load_timeout_s)  # a torch.compile program's start may still be running
    except WorkerFailure as failure:  # none of the program has run yet: the machine's fault, measured again
        raise WorkerFailure(failure.kind, f"{HARNESS_FAILED}: the worker's start, before the program was "
                            f"loaded: {failure.message}") from None
    t1 = time.perf_counter()
    reply = worker.call({"cmd": "load", "role": "candidate", "reference_path": str(worker.workdir / "reference.py"),
                         "candidate_path": str(worker.workdir / "candidate.py"), "init_seed": init_seed,
                         "module_file": module_file(worker), "device_draws": draws_path(config) if not build_only else None,
                         "build_only": build_only, "clock_skew": clock_skew},  # build_only: no plan, so no graph
                        config.build_timeout_s + config.load_timeout_s)
    # Where a load's wall goes (a batch's timing waits for its loads ahead): the worker's start, the load
    reply |= {"ready_wait_s": round(t1 - t0, 3), "load_cmd_s": round(time.perf_counter() - t1, 3)}
    if not first_call or build_only or not reply.get("ok"):
        return reply
    t0 = time.perf_counter()
    warm = _first_call(worker, config, release=True)  # it waits for its turn: the memory goes back meanwhile
    if not warm.get("ok"):  # its words and kind, as its first correctness trial would have reported them
        return warm | {"error": f"first call: {warm.get('error', 'failed')}"}
    # The load's reply, with what the warm-up's reply adds: violations and builds are the process's so far
    return reply | {k: warm[k] for k in ("violations", "builds") if k in warm} | \
        {"first_call_s": round(time.perf_counter() - t0, 3)}


def _first_call(worker: WorkerProcess, config: EvalConfig, *, release: bool) -> dict[str, Any]:
    """The program's first call: one forward on fresh inputs, nothing sent back; ``release``: its memory
    goes back to the driver afterwards."""
    return worker.call({"cmd": "warm", "seed": new_seed(), "release": release}, config.run_timeout_s)


def _first_call_alone(run: Run, quiet: Callable[[], AbstractContextManager[Any]]) -> tuple[float, float, Any]:
    """A program that tunes itself by timing makes its first call alone on its device:
    inside the batch's quiet context, once the loads ahead are done and with builds paused, so what it
    times is not shared with other programs' first calls. A failure is the program's, as in its first
    correctness trial; what the call did to the process is checked as a load's is. Returns the wait for
    the loads ahead, the call's own seconds and what the wait was for (schedule.quiet_after's label)."""
    started = time.perf_counter()
    with quiet() as waited_for:
        waited = time.perf_counter() - started
        # its memory stays in its allocator: its correctness trials come next, not a wait
        reply = _first_call(run.worker, run.config, release=False)
        took = time.perf_counter() - started - waited
    check_reply(reply, "first call")
    check_integrity(reply, run)
    run.warmed = True  # a stateful program's state moved on: _correctness builds it again
    run.flags.add("tuned_alone")
    return waited, took, waited_for


def static_verdict(problem: Problem, candidate: Candidate, config: EvalConfig) -> Evaluation | None:
    """The evaluation :func:`evaluate_candidate` gives a candidate the static checks settle (a syntax
    error: ``compile_error``; a rejected construct: ``rejected``), or None where they do not. A batch
    records these before its device loops start, with no worker, no build and no device time: in an RL
    reward call 12-14 of 18 completions were syntax errors, and each had cost a worker started and closed
    on the device loop's path (docs/evaluator.md at 88f971b, "Static verdicts before the device loop")."""
    if not config.static_checks:
        return None
    settled = _settled(_base(problem, candidate, config), candidate.source, time.perf_counter())
    return None if settled is None else replace(settled, extra={STATIC_KEY: True})


def _settled(base: Evaluation, source: str, started: float) -> Evaluation | None:
    """``base`` with the static checks' verdict on ``source``, or None where they let it run. One parse a
    source (static.summary, cached), shared by a batch's up-front check, its device loop's screen and this."""
    syntax_error, rejected, reason, flags = static_summary(source)
    if not (syntax_error or rejected):
        return None
    return replace(base, status=Status.COMPILE_ERROR if syntax_error else Status.REJECTED, reason=reason, flags=flags,
                   eval_s=time.perf_counter() - started)


def _base(problem: Problem, candidate: Candidate, config: EvalConfig) -> Evaluation:
    return Evaluation(problem.problem_id, candidate.candidate_id, Status.OK, device=config.device,
                      device_name=device_name(config.device), config_hash=config.hash,
                      problem_sha256=problem.sha256, candidate_sha256=candidate.sha256)


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
    clock_skew: str | None = None,
    agree_with: tuple[tuple[float, float, float], ...] = (),
) -> Evaluation:
    """Evaluate one candidate. Never raises for anything the candidate does; raises ``ReferenceError``
    only when the problem's own reference cannot run. A batch passes a ``prepared`` worker, the
    ``loaded`` reply of its load command when that already ran (see :func:`load_candidate`), and
    ``quiet``, a context the timing runs inside: entered once nothing else of the batch uses the device
    or the CPU cores (loads done, builds paused). ``clock_skew`` (a confirmation's, recheck.confirm) gives
    the program clocks that decide its own timing races (cudal1/evaluator/clock_skew.py). ``agree_with``
    (a re-measurement's, recheck.recheck): the earlier measurements its trials may stop on agreeing with."""
    started = time.perf_counter()
    sandbox.reap_on_term()  # a caller's main thread (evaluate-one): SIGTERM takes the workers along
    base = _base(problem, candidate, config)
    static_flags: tuple[str, ...] = ()
    if config.static_checks:
        settled = _settled(base, candidate.source, started)
        if settled is not None:
            if prepared is not None:
                prepared.close()
                shutil.rmtree(prepared.workdir.parent, ignore_errors=True)
            return settled
        static_flags = static_summary(candidate.source)[3]
    own_reference = reference is None
    reference = reference or ReferenceSession(problem, config)
    worker = prepared or prepare_candidate_worker(problem, candidate, config, extensions_root)
    run = Run(problem, candidate, config, reference, worker, set(static_flags), agree_with=agree_with)
    try:
        result, build_error = _evaluate(run, base, started, loaded, quiet, clock_skew, static_flags)
    finally:
        # beside the device loop within a batch (references.CLOSER): the next timing on this device waits for it
        close_worker(worker)
        if own_reference:
            reference.close()
    if build_error:  # the compiler's words: whether the program or the machine's toolchain is at fault
        result = replace(result, extra=result.extra | {"build_error": build_error})
    fault = binding_problems(candidate.source) if "extension_build_failed" in run.flags else []
    if fault:  # the program's own load_inline cannot build anywhere: not this machine's toolchain
        result = replace(result, extra=result.extra | {"build_fault": "; ".join(fault)[:600]})
    return replace(result, flags=tuple(sorted(run.flags)), eval_s=time.perf_counter() - started)


def _evaluate(run: Run, result: Evaluation, started: float, loaded: Future[dict[str, Any]] | None,
              quiet: Callable[[], AbstractContextManager[Any]] | None, clock_skew: str | None,
              static_flags: tuple[str, ...]) -> tuple[Evaluation, str]:
    """The candidate's load, correctness trials and timing on its worker: ``result`` with what each found,
    or with the verdict that ended them (what was recorded before it kept), and the compiler's first error
    where a build of the program failed ('' otherwise)."""
    config = run.config
    build_error = ""
    try:
        reply = loaded.result() if loaded is not None else \
            load_candidate(run.worker, run.reference.init_seed, config, clock_skew=clock_skew)
        check_reply(reply, "load")
        check_integrity(reply, run)
        result = _loaded(run, result, reply)
        build_error = (reply.get("builds") or {}).get("first_error") or ""
        tuned_wait, tuned_for = 0.0, None
        if quiet is not None and not run.warmed and tunes_itself(static_flags):
            tuned_wait, tuned_s, tuned_for = _first_call_alone(run, quiet)
            result = replace(result, extra=result.extra | {"tuned_first_call_s": round(tuned_s, 3)})
        phase = time.perf_counter()
        trials = _correctness(run)
        result = replace(result, correctness_trials=trials, max_abs_error=run.max_abs, max_rel_l2_error=run.max_rel,
                         extra=result.extra | {"max_scaled_error": run.max_scaled,
                                               "tolerance_used": round(run.tolerance_used, 4),
                                               "load_s": round(phase - started, 3),
                                               "correctness_s": round(time.perf_counter() - phase, 3)})
        if config.timing:
            result = _timed(run, result, quiet, tuned_wait, tuned_for)
    except Verdict as verdict:
        result = replace(result, status=verdict.status, reason=verdict.reason, speedup=None, speedup_low=None,
                         speedup_high=None,
                         **{k: v for k, v in verdict.extra.items() if k in ("max_abs_error", "max_rel_l2_error")})
    except WorkerFailure as failure:
        result = replace(result, status=Status(failure.kind), reason=failure.message, speedup=None,
                         speedup_low=None, speedup_high=None)
    return result, build_error


def _loaded(run: Run, result: Evaluation, reply: dict[str, Any]) -> Evaluation:
    """``result`` with what the candidate's load said: its build's seconds, where the first call's cost and
    torch.compile's start went, a cached build done again or a damaged ninja log mended (kept whatever the
    verdict); which inputs both programs are timed on (``run``'s flags)."""
    if reply.get("graphed") and run.reference.graphed:
        run.flags.add("graphed_inputs")  # both programs timed on inputs from the captured graph
    # Both programs are timed on the harness kernels' draws, or both on torch's (the same inputs either way)
    run.device_draws = bool(reply.get("device_draws")) and run.reference.device_draws
    if run.device_draws:
        run.flags.add("device_draws")
    run.warmed = reply.get("first_call_s") is not None
    ready = {k: reply[k] for k in ("first_call_s", "compile_start", "ready_wait_s", "load_cmd_s", "import_s", "prep_s")
             if reply.get(k) is not None}
    builds = reply.get("builds") or {}
    ready |= {f"cache_{key}": builds[key] for key in ("rebuilt", "healed") if builds.get(key)}
    return replace(result, build_s=reply.get("build_s"), extra=ready)


def _timed(run: Run, result: Evaluation, quiet: Callable[[], AbstractContextManager[Any]] | None,
           tuned_wait: float, tuned_for: str | None) -> Evaluation:
    """``result`` with the timing's figures, measured inside ``quiet`` (trials.measure)."""
    phase = time.perf_counter()
    with quiet() if quiet is not None else nullcontext() as waited_for:
        # The wait for the loads running ahead (a neighbour's work, see schedule.quiet_after) is
        # booked apart, so a slow neighbour does not show up as this candidate's timing.
        waited = time.perf_counter() - phase
        measured, extra = measure(run)
    if waited >= 1.0 and waited_for:  # a label from schedule.quiet_after; None without a batch
        extra["waited_for"] = waited_for
    elif tuned_wait >= 1.0 and tuned_for:  # the loads ahead were waited for before the first call alone
        extra["waited_for"] = tuned_for
    extra["timing_s"] = round(time.perf_counter() - phase - waited, 3)
    extra["wait_s"] = round(waited + tuned_wait, 3)
    return replace(result, speedup=measured.speedup, speedup_low=measured.low, speedup_high=measured.high,
                   reference_ms=measured.reference_ms, candidate_ms=measured.candidate_ms, spread=measured.spread,
                   trials=measured.trials, extra=result.extra | extra)
