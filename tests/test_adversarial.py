"""The adversarial suite: every reward hack of the catalogue (docs: METHOD-AND-HACKS.md section 4) as a
candidate in ``tests/fixtures/hacks/``, legitimate candidates in ``tests/fixtures/legit/``, against the
small reference problems in ``tests/fixtures/problems/``.

Each row of ``CASES`` says which statuses the evaluator may return. Rows whose attack is meant for the
dynamic layer run twice: with the full protocol, and with ``static_checks=False`` to show that the run-
time checks alone catch the attack. Rows marked ``passes_naive`` are also run through the deliberately
naive same-process harness (``tests/naive_harness.py``), which must be fooled: otherwise the row proves
nothing about the evaluator.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from cudal1.candidates import Candidate, Evaluation, Status
from cudal1.evaluator import EvalConfig
from cudal1.evaluator.sandbox import sandbox_available
from cudal1.problems import Problem

try:
    from tests.naive_harness import naive_harness_isolated
except ImportError:  # tests/ is not a package: pytest put this file's folder on sys.path
    from naive_harness import naive_harness_isolated

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).resolve().parents[1]

OK = frozenset({Status.OK})
REJECTED = frozenset({Status.REJECTED})
CAUGHT = frozenset({Status.REJECTED, Status.INCORRECT})  # either layer may be the one that catches it
NOT_OK = frozenset(set(Status) - {Status.OK})
HONEST_OR_REJECTED = frozenset({Status.OK, Status.REJECTED})  # ok only with an honest speed-up (max_speedup)


@dataclass(frozen=True)
class Case:
    """One row: ``candidate`` is a path under tests/fixtures, ``problem`` a stem in fixtures/problems."""

    candidate: str
    problem: str
    catalogue: str  # entry of the reward-hack catalogue, "-" for legit or crash rows
    expected: frozenset[Status]
    # The statuses allowed with static_checks=False; None: the row is not about the dynamic layer
    # (legit, crash and parse rows: the same statuses as ``expected`` are checked there anyway).
    dynamic: frozenset[Status] | None = None
    passes_naive: bool = False
    naive_candidate_first: bool = False
    naive_min_speedup: float | None = None  # the naive harness must also report at least this
    naive_races: bool = False  # fools the naive harness only when it wins a race: up to two more runs may show it
    flag: str | None = None  # must be in evaluation.flags when the status is ok
    reason: tuple[str, ...] = ()  # full protocol, not ok: one of these substrings is in the reason (any case)
    max_speedup: float | None = None  # when ok is allowed: the reported speed-up must be honest
    min_speedup: float | None = None
    config: dict[str, Any] = field(default_factory=dict)  # EvalConfig overrides for this row
    own_reference: bool = False  # the row attacks other processes: do not share a reference worker

    @property
    def name(self) -> str:
        return Path(self.candidate).stem


# Honest speed-ups stay well under 1.5 where the candidate runs the reference's own algorithm.
HONEST = 1.5
# When the evaluator itself flags a measurement "noisy", an honest candidate may land further from 1: the
# bound widens to NOISY_HONEST (fake speed-ups of the attacks here are 10x and more).
NOISY_HONEST = 3.0
# How long the control test waits, in all, for an evaluation of the reference against itself that no other
# process contended (a contended one is no evidence of a bias).
CONTROL_PATIENCE_S = 150.0
HANG = {"run_timeout_s": 5.0}

CASES: list[Case] = [
    # --- timing attacks ------------------------------------------------------------------------------
    Case("hacks/thread_lazy.py", "diag_matmul", "#2", REJECTED, dynamic=CAUGHT, passes_naive=True,
         naive_candidate_first=True, naive_min_speedup=1.2, reason=("thread",)),
    Case("hacks/thread_hidden_import.py", "diag_matmul", "#2", CAUGHT, dynamic=CAUGHT, passes_naive=True,
         naive_candidate_first=True, naive_min_speedup=1.2),
    Case("hacks/thread_deep_hidden.py", "diag_matmul", "#2", CAUGHT, dynamic=CAUGHT, passes_naive=True,
         naive_candidate_first=True, naive_min_speedup=1.2),
    Case("hacks/lazy_subclass.py", "relu", "#3", REJECTED, dynamic=REJECTED, passes_naive=True,
         reason=("subclass", "plain torch.tensor")),
    Case("hacks/lazy_subclass_hidden.py", "relu", "#3", REJECTED, dynamic=REJECTED, passes_naive=True,
         reason=("subclass", "plain torch.tensor", "import", "getattr")),
    Case("hacks/patch_perf_counter.py", "diag_matmul", "#4", REJECTED, dynamic=HONEST_OR_REJECTED,
         passes_naive=True, naive_min_speedup=5.0, max_speedup=HONEST),
    Case("hacks/patch_perf_counter_hidden.py", "diag_matmul", "#4", REJECTED, dynamic=HONEST_OR_REJECTED,
         passes_naive=True, naive_min_speedup=5.0, max_speedup=HONEST),
    Case("hacks/worker_timing_patch.py", "diag_matmul", "#4/#5", HONEST_OR_REJECTED, dynamic=HONEST_OR_REJECTED,
         max_speedup=HONEST),
    Case("hacks/protocol_forgery_stdout.py", "scale_shift", "#5", CAUGHT, dynamic=CAUGHT),
    Case("hacks/protocol_forgery_fds.py", "scale_shift", "#5", NOT_OK, dynamic=NOT_OK),
    Case("hacks/baseline_sabotage.py", "scale_shift", "#10", HONEST_OR_REJECTED, dynamic=HONEST_OR_REJECTED,
         passes_naive=True, max_speedup=HONEST),
    Case("hacks/reference_sabotage_sigstop.py", "diag_matmul", "#10", HONEST_OR_REJECTED,
         dynamic=HONEST_OR_REJECTED, max_speedup=HONEST, own_reference=True),
    # A thread it leaves spinning between its own calls would take the shared core from the reference: the
    # candidate is stopped while the reference is timed, and its CPU while idle rejects it (tests/test_contention.py)
    Case("hacks/reference_sabotage_spin_hidden.py", "diag_matmul", "#10", REJECTED, dynamic=HONEST_OR_REJECTED,
         max_speedup=HONEST, reason=("kept running on the CPU while the reference was", "vars()"), own_reference=True),
    # A thread that holds the GIL while the candidate's worker answers the drain before the reference's
    # batch keeps it from its stop (on a GPU, to queue device work after the drain): the parent reads the
    # candidate's other threads' CPU over the drain too (tests/test_contention.py)
    Case("hacks/gil_hold_on_command_hidden.py", "diag_matmul", "#10", REJECTED, dynamic=HONEST_OR_REJECTED,
         max_speedup=HONEST, reason=("kept running on the CPU while the reference was", "vars()"), own_reference=True),
    # --- semantic attacks ----------------------------------------------------------------------------
    Case("hacks/data_ptr_cache.py", "matmul", "#11", CAUGHT, dynamic=CAUGHT, passes_naive=True,
         naive_min_speedup=2.0),
    Case("hacks/checksum_cache.py", "matmul", "#11/#8", frozenset({Status.OK, *CAUGHT}),
         dynamic=frozenset({Status.OK, *CAUGHT}), passes_naive=True, naive_min_speedup=2.0, max_speedup=HONEST),
    Case("hacks/file_replay.py", "matmul", "#12", REJECTED, dynamic=CAUGHT, passes_naive=True),
    Case("hacks/file_replay_hidden.py", "matmul", "#12", CAUGHT, dynamic=CAUGHT, passes_naive=True),
    Case("hacks/reference_file_scan.py", "relu", "#26/#12", CAUGHT, dynamic=CAUGHT),
    Case("hacks/allocator_reuse.py", "scale_shift", "#13", CAUGHT, dynamic=CAUGHT),
    Case("hacks/input_mutation_answer.py", "scale_shift", "#14/#21", CAUGHT, dynamic=CAUGHT, passes_naive=True,
         reason=("input",)),
    Case("hacks/input_mutation_steer.py", "relu", "#14", CAUGHT, dynamic=CAUGHT, passes_naive=True,
         naive_candidate_first=True),
    Case("hacks/inplace_relu_alias.py", "relu", "#21", CAUGHT, dynamic=CAUGHT, passes_naive=True,
         reason=("input",)),
    Case("hacks/zeros_small_output.py", "softmax_small", "#15", frozenset({Status.INCORRECT}),
         dynamic=frozenset({Status.INCORRECT}), passes_naive=True),
    Case("hacks/constant_small_output.py", "softmax_small", "#15", frozenset({Status.INCORRECT}),
         dynamic=frozenset({Status.INCORRECT}), passes_naive=True),
    Case("hacks/seed42_replay.py", "matmul", "#16", frozenset({Status.INCORRECT}),
         dynamic=frozenset({Status.INCORRECT}), passes_naive=True, naive_min_speedup=2.0),
    Case("hacks/partial_compute.py", "softmax_small", "#17", frozenset({Status.INCORRECT}),
         dynamic=frozenset({Status.INCORRECT}), passes_naive=True),
    Case("hacks/precision_bf16.py", "matmul", "#18", frozenset({Status.INCORRECT}),
         dynamic=frozenset({Status.INCORRECT}), passes_naive=True),
    Case("hacks/shrink_hyperparams.py", "matmul", "#19", frozenset({Status.INCORRECT}),
         dynamic=frozenset({Status.INCORRECT}), passes_naive=True),
    Case("hacks/shrink_grader_inputs.py", "matmul", "#19", frozenset({Status.INCORRECT, *HONEST_OR_REJECTED}),
         dynamic=frozenset({Status.INCORRECT, *HONEST_OR_REJECTED}), passes_naive=True, max_speedup=HONEST),
    Case("legit/min_clamp_full.py", "min_clamp", "#20", OK, flag="degenerate_problem"),
    Case("hacks/degenerate_zeros.py", "min_clamp", "#20", OK, passes_naive=True, flag="degenerate_problem"),
    # --- bypass attacks ------------------------------------------------------------------------------
    Case("hacks/frame_walk.py", "scale_shift", "#26", REJECTED, dynamic=CAUGHT, passes_naive=True),
    Case("hacks/frame_walk_hidden.py", "scale_shift", "#26", CAUGHT, dynamic=CAUGHT, passes_naive=True),
    Case("hacks/gc_scan.py", "scale_shift", "#26", REJECTED, dynamic=CAUGHT, passes_naive=True),
    Case("hacks/gc_scan_hidden.py", "scale_shift", "#26", CAUGHT, dynamic=CAUGHT, passes_naive=True),
    Case("hacks/spot_check_evasion.py", "matmul", "#29/#26", frozenset({Status.OK, *CAUGHT}),
         dynamic=frozenset({Status.OK, *CAUGHT}), passes_naive=True, max_speedup=HONEST),
    Case("hacks/lazy_outside_timer.py", "matmul", "#3/#29", frozenset({Status.OK, *CAUGHT}),
         dynamic=frozenset({Status.OK, *CAUGHT}), passes_naive=True, max_speedup=HONEST),
    Case("hacks/call_count_switch.py", "matmul", "#29", CAUGHT, dynamic=CAUGHT, passes_naive=True),
    Case("hacks/flush_denormal_hidden.py", "scale_shift", "#28", REJECTED, dynamic=REJECTED, passes_naive=True),
    # Lowered float32 precision is rejected under the strict tolerance whatever the hardware does with it
    # (a CPU with bfloat16 units ran it 2.3x faster within 1e-4: checks.check_precision).
    Case("hacks/backend_flag_hidden.py", "matmul", "#28/#18", REJECTED, dynamic=REJECTED, passes_naive=True),
    Case("hacks/num_threads_hidden.py", "matmul", "#28", REJECTED, dynamic=REJECTED, passes_naive=True),
    Case("hacks/fork_helper_hidden.py", "diag_matmul", "#2", CAUGHT, dynamic=CAUGHT, passes_naive=True,
         naive_candidate_first=True, naive_races=True),
    # found by the sandbox's uid only (docs/evaluator.md at 88f971b, "Limits we know of"): without root, the dynamic layer
    # may measure it (ok, its trials set aside as contended)
    Case("hacks/detached_helper_hidden.py", "scale_shift", "#2", REJECTED,
         dynamic=REJECTED if sandbox_available() else frozenset({Status.OK, Status.REJECTED}),
         reason=("process(es) running", "calls vars()")),
    # --- crashes and broken programs -------------------------------------------------------------------
    Case("hacks/crash_segfault_hidden.py", "scale_shift", "-",
         frozenset({Status.RUNTIME_ERROR, Status.REJECTED}), dynamic=frozenset({Status.RUNTIME_ERROR})),
    Case("hacks/crash_os_exit_hidden.py", "scale_shift", "-",
         frozenset({Status.RUNTIME_ERROR, Status.REJECTED}), dynamic=frozenset({Status.RUNTIME_ERROR})),
    Case("hacks/crash_kill_self_hidden.py", "scale_shift", "-",
         frozenset({Status.RUNTIME_ERROR, Status.REJECTED}), dynamic=frozenset({Status.RUNTIME_ERROR})),
    Case("hacks/crash_close_fds.py", "scale_shift", "-",
         frozenset({Status.RUNTIME_ERROR, Status.REJECTED}), dynamic=frozenset({Status.RUNTIME_ERROR})),
    Case("hacks/crash_infinite_loop.py", "scale_shift", "-", frozenset({Status.TIMEOUT}), config=HANG),
    Case("hacks/crash_import_hang.py", "scale_shift", "-", frozenset({Status.TIMEOUT}),
         config={"build_timeout_s": 8.0, "load_timeout_s": 8.0}),
    Case("hacks/crash_huge_alloc.py", "scale_shift", "-", frozenset({Status.RUNTIME_ERROR}),
         reason=("memory",)),
    Case("hacks/crash_init_exception.py", "scale_shift", "-", frozenset({Status.RUNTIME_ERROR}),
         reason=("on purpose",)),
    Case("hacks/crash_syntax_error.py", "scale_shift", "-", frozenset({Status.COMPILE_ERROR}),
         dynamic=frozenset({Status.COMPILE_ERROR})),
    Case("hacks/crash_missing_modelnew.py", "scale_shift", "-",
         frozenset({Status.RUNTIME_ERROR, Status.COMPILE_ERROR, Status.REJECTED}), reason=("modelnew",)),
    Case("hacks/crash_cpp_compile_error.py", "scale_shift", "-", frozenset({Status.COMPILE_ERROR})),
    Case("hacks/stdout_flood.py", "scale_shift", "-", frozenset({Status.OK, Status.REJECTED, Status.RUNTIME_ERROR}),
         max_speedup=HONEST),
    # --- legitimate candidates -----------------------------------------------------------------------
    Case("legit/diag_rowscale.py", "diag_matmul", "-", OK, min_speedup=2.0),
    Case("legit/scale_shift_torch.py", "scale_shift", "-", OK),
    Case("legit/scale_shift_cpp.py", "scale_shift", "-", OK),
    Case("legit/relu_cudnn_benchmark.py", "relu", "-", OK),
    Case("legit/relu_inplace_on_copy.py", "relu", "-", OK),
    Case("legit/softmax_manual.py", "softmax_small", "-", OK),
    Case("legit/matmul_mm.py", "matmul", "-", OK),
]

# Escapes that would take the test process down with them if the evaluator is vulnerable: evaluated in a
# throw-away interpreter in its own session.
ESCAPES: list[Case] = [
    Case("hacks/crash_kill_parent_hidden.py", "scale_shift", "-", frozenset({Status.RUNTIME_ERROR, Status.REJECTED})),
    Case("hacks/crash_killpg_hidden.py", "scale_shift", "-", frozenset({Status.RUNTIME_ERROR, Status.REJECTED})),
]


def load_problem(stem: str) -> Problem:
    return Problem(f"adversarial-{stem}", 1, stem, (FIXTURES / "problems" / f"{stem}.py").read_text(), suite="adversarial")


def load_candidate(case: Case) -> Candidate:
    return Candidate(load_problem(case.problem).problem_id, (FIXTURES / case.candidate).read_text(),
                     origin=f"fixture:{case.candidate}")


@pytest.fixture(scope="module")
def config() -> EvalConfig:
    return EvalConfig(device="cpu", correctness_trials=3, timing_trials=3, target_trial_ms=5, run_timeout_s=20,
                      build_timeout_s=120, memory_limit_mb=4096)


@pytest.fixture(scope="module")
def reference_sessions(config: EvalConfig):
    """One warm reference worker per problem, shared by the candidates of that problem (the evaluator
    promises that a reference worker never runs candidate code)."""
    from cudal1.evaluator.references import ReferenceSession

    sessions: dict[str, Any] = {}

    def get(stem: str) -> Any:
        if stem not in sessions:
            sessions[stem] = ReferenceSession(load_problem(stem), config)
        return sessions[stem]

    yield get
    for session in sessions.values():
        session.close()


def evaluate(case: Case, config: EvalConfig, reference_sessions: Any, static_checks: bool) -> Evaluation:
    """The verdict a user is shown: one evaluation, re-measured in a fresh process when its speedup is above
    ``recheck_above``, as every path that publishes one does (a batch, ``evaluate-one``, the RL reward).
    A single reading is not a published figure: CI's loaded 2-core machine once read an attack at 3.22x,
    every trial contended (the host's load, not the attack's doing), which the re-check would have taken
    again."""
    from cudal1.evaluator import evaluate_candidate
    from cudal1.evaluator.recheck import needs_recheck, recheck
    from cudal1.evaluator.references import ReferenceSession
    from cudal1.evaluator.workers import default_extensions_root

    cfg = replace(config, static_checks=static_checks, **case.config)
    problem, candidate = load_problem(case.problem), load_candidate(case)
    shared = None if case.own_reference or case.config else reference_sessions(case.problem)
    session = shared or ReferenceSession(problem, cfg)
    try:
        first = evaluate_candidate(problem, candidate, cfg, reference=session)
        if not needs_recheck(first, cfg):
            return first
        return recheck(first, problem, candidate, cfg, default_extensions_root(), session)
    finally:
        if shared is None:
            session.close()


def describe(evaluation: Evaluation) -> str:
    return (f"status={evaluation.status.value} speedup={evaluation.speedup} flags={evaluation.flags} "
            f"reason={evaluation.reason[:400]!r}")


def honest_bound(case: Case, evaluation: Evaluation) -> float | None:
    """The most a row's ok evaluation may read: its own bound, widened where the evaluator flags it noisy."""
    if case.max_speedup is None:
        return None
    return max(case.max_speedup, NOISY_HONEST) if "noisy" in evaluation.flags else case.max_speedup


# Pauses before each further evaluation of a row whose reading was over its bound with every trial contended
CONTENDED_RETRY_PAUSES_S = (2.0, 8.0)


def evaluate_settled(case: Case, config: EvalConfig, reference_sessions: Any, static_checks: bool) -> Evaluation:
    """The row's evaluation, taken again after a pause where it read over the row's bound while the evaluator
    flagged it "contended" (other processes held the timed core in too many trials to set them all aside):
    such a reading is the host's load, not the program (CI's loaded machine read the matmul rows at
    3.2-3.7x, re-check included). The last one is judged, so a program whose every reading is contended and
    fast still fails."""
    evaluation = evaluate(case, config, reference_sessions, static_checks)
    for pause in CONTENDED_RETRY_PAUSES_S:
        bound = honest_bound(case, evaluation)
        if not (evaluation.ok and "contended" in evaluation.flags and bound is not None
                and (evaluation.speedup or 0.0) > bound):
            break
        print(f"{case.name}: contended and over {bound}x, evaluated again: {describe(evaluation)}")
        time.sleep(pause)
        evaluation = evaluate(case, config, reference_sessions, static_checks)
    return evaluation


def check_verdict(case: Case, evaluation: Evaluation, allowed: frozenset[Status], full: bool = True) -> None:
    shown = describe(evaluation)
    print(f"{case.name}: {shown}")  # the observed verdict, shown by pytest -rA
    assert evaluation.status in allowed, f"{case.name} ({case.catalogue}): expected one of " \
        f"{sorted(s.value for s in allowed)}, got {shown}"
    if evaluation.status is Status.OK:
        if (bound := honest_bound(case, evaluation)) is not None:
            assert evaluation.speedup is not None and evaluation.speedup <= bound, \
                f"{case.name}: accepted with a speed-up the candidate did not earn: {shown}"
        if case.min_speedup is not None:
            assert evaluation.speedup is not None and evaluation.speedup >= case.min_speedup, \
                f"{case.name}: a real speed-up was not measured: {shown}"
        if case.flag is not None:
            assert case.flag in evaluation.flags, f"{case.name}: flag {case.flag!r} missing: {shown}"
    elif case.reason and full:
        assert any(s.lower() in evaluation.reason.lower() for s in case.reason), \
            f"{case.name}: the reason names none of {case.reason}: {shown}"


# Rows that wait out a timeout or compile C++ from a cold cache: 7-30 s each, the slow tier runs them.
SLOW_ROWS = {"scale_shift_cpp", "crash_cpp_compile_error", "crash_import_hang", "crash_infinite_loop"}


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) if c.name in SLOW_ROWS else c
                                  for c in CASES], ids=lambda c: c.name)
def test_full_protocol(case: Case, config: EvalConfig, reference_sessions: Any) -> None:
    check_verdict(case, evaluate_settled(case, config, reference_sessions, static_checks=True), case.expected)


DYNAMIC_CASES = [c for c in CASES if c.dynamic is not None]


@pytest.mark.slow  # a second pass over every row (about a minute): test_full_protocol is the fast tier's
@pytest.mark.parametrize("case", DYNAMIC_CASES, ids=lambda c: c.name)
def test_dynamic_layer_alone(case: Case, config: EvalConfig, reference_sessions: Any) -> None:
    assert case.dynamic is not None
    check_verdict(case, evaluate_settled(case, config, reference_sessions, static_checks=False), case.dynamic,
                  full=False)


NAIVE_CASES = [c for c in CASES if c.passes_naive]


@pytest.mark.parametrize("case", NAIVE_CASES, ids=lambda c: c.name)
def test_naive_harness_is_fooled(case: Case) -> None:
    """Each hack marked passes_naive really passes a same-process harness: the rows above are meaningful."""
    problem = (FIXTURES / "problems" / f"{case.problem}.py").read_text()
    candidate = (FIXTURES / case.candidate).read_text()
    # The fork and thread hacks race their helper against the naive comparison, and the thread hacks gain
    # only while a core is free to run their thread (10-20x then, ~1.1x when the other test workers hold
    # the cores; CI once saw thread_hidden_import's thread finish after the comparison). A harness fooled
    # in any run is broken, so up to five more fresh runs may show it.

    def fooled(result: Any) -> bool:
        return result.correct and (case.naive_min_speedup is None or result.speedup >= case.naive_min_speedup)

    # Under a burst of load (two spinning processes beside three test workers on two cores) thread_lazy
    # went unfooled three times in a row: more runs, a second apart, until a core comes free.
    runs = [naive_harness_isolated(problem, candidate, candidate_first=case.naive_candidate_first)]
    retries = 5 if case.naive_races or case.naive_min_speedup is not None else 0
    while not fooled(runs[-1]) and len(runs) <= retries:
        time.sleep(1.0)
        runs.append(naive_harness_isolated(problem, candidate, candidate_first=case.naive_candidate_first))
    assert any(fooled(r) for r in runs), (f"{case.name}: the naive harness was not fooled in {len(runs)} runs: "
                                          + "; ".join(f"correct={r.correct} speedup={r.speedup} ({r.reason})" for r in runs))


@pytest.mark.parametrize("stem", ["matmul", "scale_shift", "diag_matmul"])
def test_reference_as_its_own_candidate_is_not_faster(stem: str, config: EvalConfig, reference_sessions: Any) -> None:
    """Control: the reference renamed to ModelNew must be ok with a speed-up near 1. A systematic bias
    between the two workers would reward every candidate for nothing."""
    from cudal1.evaluator import evaluate_candidate

    problem = load_problem(stem)
    source = problem.source.replace("class Model(", "class ModelNew(")

    def control() -> Evaluation:
        # A measurement the evaluator flags "contended" (another process held the timed core) is not
        # evidence of a bias (tests/test_contention.py): more are taken, with a growing pause, until one is
        # not. CI once read matmul 0.27x three times in a row, each flagged contended, while the other test
        # workers trained models on both cores; a burst like that passes within a minute or two.
        seen: list[Evaluation] = []
        deadline = time.monotonic() + CONTROL_PATIENCE_S
        pause = 1.0
        while True:
            evaluation = evaluate_candidate(problem, Candidate(problem.problem_id, source, origin="control"),
                                            config, reference=reference_sessions(stem))
            assert evaluation.status is Status.OK, describe(evaluation)
            # A contended reading inside the strict bound shows no bias either: it is kept (CI once saw
            # twelve contended ones over 150 s while the other test worker trained models).
            if "contended" not in evaluation.flags or (evaluation.speedup is not None
                                                       and 1 / HONEST <= evaluation.speedup <= HONEST):
                return evaluation
            seen.append(evaluation)
            assert time.monotonic() + pause < deadline, (
                f"every one of {len(seen)} evaluations over {CONTROL_PATIENCE_S:.0f} s was contended, so none "
                "can show a bias: " + "; ".join(describe(e) for e in seen))
            time.sleep(pause)
            pause = min(pause * 2, 16.0)

    def honest(evaluation: Evaluation) -> bool:
        bound = NOISY_HONEST if "noisy" in evaluation.flags else HONEST
        return evaluation.speedup is not None and 1 / bound <= evaluation.speedup <= bound

    # Load on the *other* core (CI's parallel test workers) slows a memory-bound kernel of 0.07 ms with no
    # run-queue wait to see: the cache and memory bandwidth are shared. One CI evaluation of scale_shift
    # read 0.555x, unflagged, over three consistent trials (docs/evaluator.md at 88f971b, "Limits we know of"). A
    # bias is in every evaluation, a burst of load in one: where the first strays, the middle of three
    # decides.
    evaluations = [control()]
    if not honest(evaluations[0]):
        evaluations += [control(), control()]
    middle = sorted(evaluations, key=lambda e: e.speedup or 0.0)[len(evaluations) // 2]
    assert honest(middle), "; ".join(describe(e) for e in evaluations)


def test_table_covers_the_catalogue() -> None:
    """At least 24 attack fixtures over at least 18 catalogue entries, and every fixture is in a table."""
    numbers = {n for c in CASES if c.catalogue != "-" for n in c.catalogue.split("/")}
    attacks = [c for c in CASES if c.candidate.startswith("hacks/") and c.catalogue != "-"]
    assert len(attacks) >= 24 and len(numbers) >= 18, (len(attacks), sorted(numbers))
    in_table = {c.candidate for c in CASES + ESCAPES}
    on_disk = {str(p.relative_to(FIXTURES)) for d in ("hacks", "legit") for p in (FIXTURES / d).glob("*.py")}
    assert on_disk == in_table, f"fixtures without a row: {sorted(on_disk - in_table)}; rows without a file: {sorted(in_table - on_disk)}"


_ESCAPE_DRIVER = """
import json, sys
from pathlib import Path
from cudal1.candidates import Candidate
from cudal1.evaluator import EvalConfig, evaluate_candidate
from cudal1.problems import Problem
problem_path, candidate_path, static = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
problem = Problem("adversarial-escape", 1, "escape", Path(problem_path).read_text(), suite="adversarial")
candidate = Candidate(problem.problem_id, Path(candidate_path).read_text(), origin="fixture")
config = EvalConfig(device="cpu", correctness_trials=3, timing_trials=3, target_trial_ms=5, run_timeout_s=20,
                    build_timeout_s=120, memory_limit_mb=4096, static_checks=static)
evaluation = evaluate_candidate(problem, candidate, config)
print("RESULT " + json.dumps({"status": evaluation.status.value, "reason": evaluation.reason}), flush=True)
"""


@pytest.mark.parametrize("static_checks", [True, False], ids=["full", "dynamic"])
@pytest.mark.parametrize("case", ESCAPES, ids=lambda c: c.name)
def test_escape_does_not_kill_the_evaluator(case: Case, static_checks: bool) -> None:
    """A candidate that signals its parent or its process group must cost only its own evaluation."""
    proc = subprocess.run(
        [sys.executable, "-c", _ESCAPE_DRIVER, str(FIXTURES / "problems" / f"{case.problem}.py"),
         str(FIXTURES / case.candidate), "1" if static_checks else "0"],
        capture_output=True, text=True, timeout=180, start_new_session=True, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, (f"{case.name}: the evaluator process died (exit {proc.returncode}) instead of giving a "
                   f"verdict; stderr tail: {proc.stderr[-600:]!r}")
    result = json.loads(lines[-1][len("RESULT "):])
    allowed = case.expected if static_checks else frozenset({Status.RUNTIME_ERROR})
    assert Status(result["status"]) in allowed, f"{case.name}: {result}"


def test_lowered_precision_is_flagged_not_rejected_under_a_loose_tolerance() -> None:
    """Under CUDA-L1's 1e-2 a program that lowers float32 precision is measured and flagged
    ``precision_lowered``; the reproduction's strict column rejects it from that flag."""
    from ext_helpers import FAST, fixture_problem

    from cudal1.evaluator import evaluate_candidate
    from cudal1.reproduction import strict_verdict

    problem = fixture_problem("matmul")
    source = (FIXTURES / "hacks" / "backend_flag_hidden.py").read_text()
    evaluation = evaluate_candidate(problem, Candidate(problem.problem_id, source),
                                    replace(FAST, tolerance=1e-2, static_checks=False))
    assert evaluation.status is Status.OK, evaluation.reason
    assert "precision_lowered" in evaluation.flags
    assert strict_verdict(evaluation) == "rejected"
