"""What follows a first measurement before anyone is shown it (:func:`evaluate_guarded`, one evaluation as
a batch records it): CUDA-L1's re-measurement of a large speedup (:func:`recheck`), and the confirmations
of a pass near its tolerance or by a program that reads the clock (:func:`confirm`). What a batch gets ready
for a re-measurement: where the results history says a candidate's speedup was above ``recheck_above``
before, a second worker of it starts and loads ahead with the coming candidates (:class:`Twins`), so the
re-measurement does not wait for a fresh process's start and load on the device's critical path. Also the
evaluations a batch records for its harness's own failures."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from contextlib import nullcontext
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from cudal1.candidates import HARNESS_FAILED, REFERENCE_FAILED, Candidate, Evaluation, Status
from cudal1.evaluator.clock_skew import SKEWS
from cudal1.evaluator.config import EvalConfig
from cudal1.evaluator.core import evaluate_candidate
from cudal1.evaluator.process import WorkerProcess
from cudal1.evaluator.references import CLOSER, ReferenceError, ReferenceSession
from cudal1.evaluator.schedule import Ahead, Coming, quiet_after
from cudal1.evaluator.timing import agreeing_pair, interval_of
from cudal1.evaluator.workers import device_name, release_cache
from cudal1.problems import Problem


def needs_recheck(result: Evaluation, config: EvalConfig) -> bool:
    """Whether ``result`` is re-measured before anyone is shown it: every path that publishes an
    evaluation (a batch, ``evaluate-one``, the RL reward) re-checks a speedup above ``recheck_above``."""
    return result.ok and config.recheck_above is not None and (result.speedup or 0.0) > config.recheck_above


def recheck(first: Evaluation, problem: Problem, candidate: Candidate, config: EvalConfig, ext_root: Path,
            session: ReferenceSession, ready: Ahead[WorkerProcess] | None = None) -> Evaluation:
    """CUDA-L1's guard against lucky or hacked outliers: measure again, the candidate in a fresh process.
    CUDA-L1 compares two single figures (reject beyond 10%); here each measurement carries the confidence
    interval of its median, and two measurements agree unless the faster one's interval lies above the
    slower one's by more than ``recheck_limit``: our own timing noise never rejects a program, a speed that
    does not repeat does. When the first two disagree, a third measurement settles it (``recheck_measurements=2``
    decides at once); the slowest agreeing measurement is kept, so a lucky one never counts. Where no two
    of three agree, a program that was above ``recheck_above`` under every measurement is kept at its
    slowest (flag ``recheck_unsteady``): it is fast each time, only not steady; any other is rejected. A
    re-measurement's trials stop once its interval agrees with an earlier one's (flag
    ``agreed_early``; each measurement's trials and whether it stopped so in ``recheck_trials`` and
    ``recheck_agreed_early``).

    It runs on the first one's own device, whose loop waits for it (on another device it ran beside that
    device's own timing, and both figures were the worse for it). The candidate loads again in a fresh
    worker; the reference is the batch's own ``session`` (trusted code, no candidate process can reach
    it): a fresh reference worker cost every re-measurement a reference load and twice its device memory
    (a large problem ran out of memory so). ``ready``: a second
    worker of the candidate that started and loaded ahead (:class:`Twins`), used by the first
    re-measurement; it ran no timed call and never met the first measurement's process."""
    measured, kept, device = [first], first, config.device
    intervals, agreed = [interval_of(first)], False
    ahead_used = ready is not None

    def measure() -> Evaluation:
        nonlocal ready
        prepared = {} if ready is None else {"prepared": ready.worker, "loaded": ready.loaded}
        ready = None  # one use: later measurements, and a retry, get a fresh worker
        # its trials stop once it agrees with an earlier one: that is all it asks
        return evaluate_candidate(problem, candidate, config, reference=session, extensions_root=ext_root,
                                  quiet=quiet_after([], device), agree_with=tuple(intervals), **prepared)

    for _ in range(config.recheck_measurements - 1):
        second = _fresh(measure, session)
        if out_of_memory(second):  # alone: the harness's failure
            return reference_failed(problem, candidate, config, f"re-measurement on {device} ran out of device "
                                     f"memory: {second.reason}", HARNESS_FAILED)
        if not second.ok or second.speedup is None or first.speedup is None:
            return replace(first, status=second.status if not second.ok else Status.REJECTED,
                           reason=f"re-measurement on {device} failed: {second.reason}", speedup=None,
                           speedup_low=None, speedup_high=None)
        measured.append(second)
        kept = min((kept, second), key=lambda e: e.speedup or 0.0)  # the conservative one
        intervals = [interval_of(e) for e in measured]
        if agreed := agreeing_pair(intervals, config.recheck_limit):
            break
    return _rechecked(first, kept, measured, agreed, ahead_used, config)


def _rechecked(first: Evaluation, kept: Evaluation, measured: list[Evaluation], agreed: bool, ahead_used: bool,
               config: EvalConfig) -> Evaluation:
    """The re-check's verdict on ``measured`` (the first measurement and its re-measurements, ``kept`` the
    slowest of them), with their record."""
    device, intervals = config.device, [interval_of(e) for e in measured]
    speedups = [e.speedup for e in measured]
    record = {"recheck_device": device, "recheck_speedup": speedups[1], "recheck_speedups": speedups,
              "recheck_intervals": [list(i[1:]) for i in intervals], "recheck_ahead": ahead_used,
              "recheck_trials": [e.trials for e in measured],
              "recheck_agreed_early": ["agreed_early" in e.flags for e in measured]}
    # Fast under every measurement, though no two agree (one program read 74.75x, 51.76x and 60.62x, all
    # apart): kept at the slowest, flagged. Rejected, a program punished for being fast; kept at the
    # slowest, no measurement counts that another did not beat. Three or more measurements: with two
    # (recheck_measurements=2, CUDA-L1's rule) a disagreement rejects.
    fast_each_time = len(measured) > 2 and config.recheck_above is not None and \
        all((e.speedup or 0.0) > config.recheck_above for e in measured)
    if not agreed and not fast_each_time:
        shown = ", ".join(f"{s:.2f}x [{low:.2f}, {high:.2f}]" for s, low, high in intervals)
        return replace(first, status=Status.REJECTED, speedup=None, speedup_low=None, speedup_high=None,
                       extra=first.extra | record,
                       reason=f"speedup {first.speedup:.2f}x not reproduced: {shown} on {device}; no two "
                              f"intervals within {config.recheck_limit:.0%} of each other")
    flags = set(first.flags) | set(kept.flags) | {"rechecked"} | ({"recheck_tiebreak"} if len(measured) > 2 else set())
    if not agreed:
        flags.add("recheck_unsteady")
    return replace(kept, extra=kept.extra | record, flags=tuple(sorted(flags)))  # the kept one's own figures


def _fresh(measure: Callable[[], Evaluation], session: ReferenceSession) -> Evaluation:
    """A measurement of the candidate in a fresh worker. Out of device memory, once more with the reference
    worker restarted: its cached memory (its model, inputs, graphs) sat beside the fresh candidate, and a
    restart gives all of it back; it loads again on its next use. The workers still closing on the device
    (references.CLOSER) have given theirs back by then too."""
    result = measure()
    if out_of_memory(result):
        CLOSER.wait()
        session.restart()
        result = measure()
    return result


def confirmations(result: Evaluation, config: EvalConfig) -> int:
    """How many times a pass is checked again in fresh processes (:func:`confirm`): ``confirm_edge`` where it
    passed near its tolerance (flag ``tolerance_edge``), at least ``confirm_clock`` where it reads the clock
    (flag ``reads_clock``: a program that picks its path by its own timing may pick another elsewhere, L1-13's
    float16 path). A pass re-measured above ``recheck_above`` already ran in fresh processes on the same
    weights with true clocks, which race as the first did: only its clock's confirmations remain (L1-60 and
    L1-70 time their own variants and read above 3×)."""
    if not result.ok:
        return 0
    clock = config.confirm_clock if "reads_clock" in result.flags else 0
    if "rechecked" in result.flags:
        return clock
    return max(config.confirm_edge if "tolerance_edge" in result.flags else 0, clock)


def needs_confirmation(result: Evaluation, config: EvalConfig) -> bool:
    """Whether :func:`confirm` checks a pass again (:func:`confirmations`)."""
    return confirmations(result, config) > 0


def confirm(first: Evaluation, problem: Problem, candidate: Candidate, config: EvalConfig, ext_root: Path,
            session: ReferenceSession) -> Evaluation:
    """A pass near its tolerance (or one that reads the clock), checked again :func:`confirmations` times,
    correctness only, in fresh processes, on fresh draws (and the edge trials where it is near the edge again).

    Near its tolerance, each time with fresh weights (a new reference session: a new init seed for the
    reference and the candidate alike). L2-27's error is set by its weights: within one run its first
    process and a fresh one read 0.9268 and 0.9264 of its limit, while runs (each with its own init seed)
    read 0.87-0.97 or failed at 1.03-1.29, passing 7 of 15 (docs/evaluator.md at 88f971b, "A pass near its tolerance
    is confirmed"). More draws, or processes, on the same weights cannot make such a verdict repeat; more
    weights make it the same in every run.

    A pass by a program that reads the clock, on the first evaluation's weights, each time under clocks that
    decide its timing races for it, its first-timed variant winning, then its last-timed
    (:mod:`cudal1.evaluator.clock_skew`): a fresh process with a true clock mostly picks what the first one
    picked (L1-13 passed in two runs of seven with three such confirmations on one H200). An incorrect or
    rejected path fails it; an error under such a clock (a timeout of its own that the clock ran past) is
    noted (flag ``clock_skew_error``), not held against it.

    A program is correct only where correct on every check: a failure is its verdict; a pass keeps the first
    evaluation's figures, flagged ``edge_confirmed`` (``clock_confirmed`` for a pass confirmed only because
    it reads the clock; ``..._failed`` for a failure)."""
    edge = "tolerance_edge" in first.flags
    kind, why = ("edge", f"passed near its tolerance ({first.extra.get('tolerance_used')} of it)") if edge else \
        ("clock", "passed, and picks its path by its own clock")
    clocked = "reads_clock" in first.flags and config.confirm_clock > 0
    check = replace(config, timing=False)

    def once(skew: str | None) -> Evaluation:
        # near the edge under its own init seed; otherwise its race, not its weights, is the question and the
        # batch's reference serves (nullcontext: not closed here)
        with ReferenceSession(problem, config) if edge else nullcontext(session) as reference:
            return evaluate_candidate(problem, candidate, check, reference=reference, extensions_root=ext_root,
                                      clock_skew=skew)

    used: list[float] = []
    notes: set[str] = set()
    started = time.perf_counter()
    for i in range(confirmations(first, config)):
        skew = SKEWS[i % len(SKEWS)] if clocked else None
        # out of device memory: once more with the batch's reference worker restarted (_fresh)
        again = _fresh(partial(once, skew), session)
        if out_of_memory(again):
            return reference_failed(problem, candidate, config, f"confirmation on {config.device} ran out of "
                                    f"device memory: {again.reason}", HARNESS_FAILED)
        if not again.ok and skew is not None and again.status not in (Status.INCORRECT, Status.REJECTED):
            notes.add("clock_skew_error")
            continue
        if not again.ok:
            how = f"with its {skew}-timed variant made to win its own timing" if skew else "with fresh weights"
            return replace(first, status=again.status, speedup=None, speedup_low=None, speedup_high=None,
                           max_abs_error=again.max_abs_error, max_rel_l2_error=again.max_rel_l2_error,
                           reason=f"{why}, then in a fresh process {how}: {again.reason}",
                           extra=first.extra | {"confirm_s": round(time.perf_counter() - started, 3)},
                           flags=tuple(sorted(set(first.flags) | {f"{kind}_confirm_failed"} | notes)))
        used.append(again.extra.get("tolerance_used", 0.0))
    return replace(first, extra=first.extra | {"confirm_tolerance_used": used,
                                                "confirm_s": round(time.perf_counter() - started, 3)},
                   flags=tuple(sorted(set(first.flags) | {f"{kind}_confirmed"} | notes)))


def expected_rechecks(history: Iterable[Evaluation], config: EvalConfig) -> set[str]:
    """The source hashes of the candidates whose re-check the history foretells: an earlier evaluation of
    theirs (any protocol) was re-checked or read above ``recheck_above``, and none ran short of device
    memory. A release run's re-checked rows cost two to three evaluations each, a fresh worker's start
    and load (0.5-3 s on an H100) among them."""
    if config.recheck_above is None or not config.timing:
        return set()
    history = list(history)
    # A second copy of a program that needed the device to itself (retried alone, or out of memory) would
    # only run the first measurement out of memory, and cost it a retry alone
    crowded = {e.candidate_sha256 for e in history if "retried_alone" in e.flags or out_of_memory(e)}
    return {e.candidate_sha256 for e in history if e.candidate_sha256 and
            ("recheck_speedups" in e.extra or (e.ok and (e.speedup or 0.0) > config.recheck_above))} - crowded


class Twins:
    """A second copy of each candidate whose re-check is expected (:func:`expected_rechecks`), in the
    device loop's view of what comes next, so :class:`cudal1.evaluator.schedule.RunAhead` starts and
    loads a second worker of it with the first. The copy is a distinct object (RunAhead keys workers by
    object), made once per candidate; the device loop takes its worker only for a re-check, and one not
    taken goes with the next batch of loads, as any worker no longer coming does."""

    def __init__(self, expected: set[str]) -> None:
        self.expected = expected
        self.made: dict[int, Candidate] = {}

    def of(self, c: Candidate) -> Candidate | None:
        """The candidate's twin, or None when no re-check is expected."""
        if c.sha256 not in self.expected:
            return None
        return self.made.setdefault(id(c), replace(c))

    def around(self, coming: list[Coming], current: Coming | None = None) -> list[Coming]:
        """``coming`` with each expected re-check's twin right after its candidate, and the ``current``
        candidate's twin (still to be used) last: RunAhead sends a batch of loads when the first in view
        has none, which must stay the next candidate."""
        out: list[Coming] = []
        for p, c, f in coming:
            out.append((p, c, f))
            if (twin := self.of(c)) is not None:
                out.append((p, twin, f))
        if current is not None and (twin := self.of(current[1])) is not None:
            out.append((current[0], twin, current[2]))
        return out


def out_of_memory(result: Evaluation) -> bool:
    """A failure for want of device memory, the harness's or the candidate's (whose load may have run
    beside a batch of others): worth one retry with nothing ahead. Alone, the candidate's own failure
    stands."""
    return not result.ok and "out of memory" in result.reason.lower()


def reference_failed(problem: Problem, c: Candidate, cfg: EvalConfig, message: str,
                     prefix: str = REFERENCE_FAILED) -> Evaluation:
    """An evaluation that says nothing about the candidate: its problem's reference (or the harness) failed.
    Its reason starts with ``prefix``, which :func:`cudal1.candidates.harness_failed` looks for."""
    flag = prefix.replace(" ", "_")
    return Evaluation(problem.problem_id, c.candidate_id, Status.RUNTIME_ERROR, reason=f"{prefix}: {message}",
                      flags=(flag,), device=cfg.device, device_name=device_name(cfg.device),
                      config_hash=cfg.hash, problem_sha256=problem.sha256, candidate_sha256=c.sha256)


def evaluate_guarded(problem: Problem, c: Candidate, cfg: EvalConfig, session: ReferenceSession, ext_root: Path,
                     ready: Callable[[], Ahead[WorkerProcess] | None] = lambda: None, **kwargs: Any) -> Evaluation:
    """One evaluation as a batch records it: re-checked when its speedup is large, confirmed when it passed
    near its tolerance or reads the clock, and never raising: a failure of the reference or of the harness
    itself (e.g. the parent out of device memory) is recorded against the harness, never the candidate,
    and the batch goes on. ``ready`` hands over a second worker of the candidate loaded ahead for its
    re-check (:class:`Twins`), taken only when one is made."""
    try:
        result = evaluate_candidate(problem, c, cfg, reference=session, extensions_root=ext_root, **kwargs)
        if needs_recheck(result, cfg):
            result = recheck(result, problem, c, cfg, ext_root, session, ready())
        if needs_confirmation(result, cfg):  # a re-checked pass still meets clocks that decide its races
            result = confirm(result, problem, c, cfg, ext_root, session)
    except ReferenceError as exc:
        result = reference_failed(problem, c, cfg, str(exc))
    except Exception as exc:  # noqa: BLE001 - the harness's own failure
        result = reference_failed(problem, c, cfg, f"{type(exc).__name__}: {exc}", HARNESS_FAILED)
    finally:
        release_cache(cfg)
    return result
