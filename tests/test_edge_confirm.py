"""A pass near its tolerance is checked again with fresh weights in fresh processes (EvalConfig.confirm_edge,
recheck.confirm): a program whose error is set by its weights (L2-27's on the GPU) or by its process passes or
fails a whole run at once, so more draws on the same weights cannot make its verdict repeat. Real workers on
the CPU, through the batch."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from cudal1.candidates import Candidate, Evaluation, Status
from cudal1.evaluator import EvalConfig, references
from cudal1.evaluator.batch import evaluate_many
from cudal1.evaluator.recheck import confirmations, needs_confirmation
from tests.edge_problem import PROBLEM, REFERENCE, program


def _by_weights() -> Candidate:
    """Near the edge (0.7 of float32's 1e-4) under the weights of some init seeds, over it under others: its
    one 'weight' is the first draw after the harness seeds the construction."""
    return Candidate(PROBLEM.problem_id, REFERENCE + '''

class ModelNew(Model):
    def __init__(self):
        super().__init__()
        self.k = float(torch.rand(1))

    def forward(self, x):
        return torch.relu(x) * 2.0 + (7e-5 if self.k < 0.5 else 2e-4)
''')


def _seed_where(edge: bool) -> int:
    """An init seed whose first draw puts _by_weights at the edge (or over it)."""
    for seed in range(1000):
        torch.manual_seed(seed)
        if (float(torch.rand(1)) < 0.5) == edge:
            return seed
    raise AssertionError("no such seed")


def _per_process(mark: Path) -> Candidate:
    """Near the edge (0.7 of float32's 1e-4) in the first process that loads it, over it in every later one.
    The mark stands for whatever a process sets at its start: a library's algorithm, a path the program
    chose by its clock."""
    return Candidate(PROBLEM.problem_id, REFERENCE + f'''
import os

_later = os.path.exists({str(mark)!r})
if not _later:
    open({str(mark)!r}, "w").close()


class ModelNew(Model):
    def forward(self, x):
        return torch.relu(x) * 2.0 + (2e-4 if _later else 7e-5)
''')


def _clocked() -> Candidate:
    """Exact under the weights of some init seeds, far off under others, and reads the clock (flag
    reads_clock): a program that picks its path by its own timing, as L1-13 picks its float16 one."""
    return Candidate(PROBLEM.problem_id, REFERENCE + '''
import time


class ModelNew(Model):
    def __init__(self):
        super().__init__()
        self.started = time.perf_counter()
        self.k = float(torch.rand(1))

    def forward(self, x):
        return torch.relu(x) * 2.0 + (0.0 if self.k < 0.5 else 1e-2)
''')


def _cfg(**kw: object) -> EvalConfig:
    return EvalConfig(device="cpu", timing=False, correctness_trials=3, edge_trials=4, static_checks=False, **kw)


def _evaluate(candidate: Candidate, cfg: EvalConfig, root: Path) -> Evaluation:
    [result] = evaluate_many([PROBLEM], [candidate], cfg, extensions_root=root)
    return result


def test_a_pass_near_the_edge_that_fails_in_a_fresh_process_is_incorrect(shared_dir: Path, ext_root: Path) -> None:
    result = _evaluate(_per_process(shared_dir / "loaded"), _cfg(), ext_root)
    assert result.status is Status.INCORRECT, result
    assert "passed near its tolerance" in result.reason and "in a fresh process" in result.reason, result.reason
    assert "edge_confirm_failed" in result.flags and result.speedup is None


def test_a_pass_near_the_edge_that_fails_under_fresh_weights_is_incorrect(monkeypatch: pytest.MonkeyPatch,
                                                                         ext_root: Path) -> None:
    seeds = iter([_seed_where(edge=True), _seed_where(edge=True), _seed_where(edge=False)])
    monkeypatch.setattr(references, "new_seed", lambda: next(seeds))  # the reference sessions' init seeds
    result = _evaluate(_by_weights(), _cfg(confirm_edge=2), ext_root)
    assert result.status is Status.INCORRECT, result
    assert "with fresh weights" in result.reason and "edge_confirm_failed" in result.flags, result.reason
    assert result.max_rel_l2_error is not None and result.speedup is None


def test_a_pass_near_the_edge_under_every_set_of_weights_is_confirmed(monkeypatch: pytest.MonkeyPatch,
                                                                     ext_root: Path) -> None:
    monkeypatch.setattr(references, "new_seed", lambda: _seed_where(edge=True))
    result = _evaluate(_by_weights(), _cfg(confirm_edge=2), ext_root)
    assert result.status is Status.OK and "edge_confirmed" in result.flags, result.reason
    assert len(result.extra["confirm_tolerance_used"]) == 2


def test_a_pass_that_reads_the_clock_is_confirmed_on_its_own_weights(monkeypatch: pytest.MonkeyPatch,
                                                                      ext_root: Path) -> None:
    """Its race is the question, not its weights (tests/test_clock_skew.py): the confirmations use the first
    evaluation's reference, so weights that would fail it are never drawn; 0 confirms nothing."""
    drawn: list[int] = []

    def new_seed() -> int:  # the first reference session's weights pass it, any later one's fail it
        drawn.append(_seed_where(edge=not drawn))
        return drawn[-1]

    monkeypatch.setattr(references, "new_seed", new_seed)
    cfg = EvalConfig(device="cpu", timing=False, correctness_trials=3)
    kept = _evaluate(_clocked(), cfg, ext_root)
    assert kept.status is Status.OK and "clock_confirmed" in kept.flags, kept.reason
    assert len(kept.extra["confirm_tolerance_used"]) == cfg.confirm_clock and len(drawn) == 1
    drawn.clear()
    off = _evaluate(_clocked(), replace(cfg, confirm_clock=0), ext_root)
    assert off.status is Status.OK and "reads_clock" in off.flags and "clock_confirmed" not in off.flags


def test_a_steady_pass_near_the_edge_is_confirmed_and_keeps_its_figures(ext_root: Path) -> None:
    result = _evaluate(program(7e-5), _cfg(), ext_root)
    assert result.status is Status.OK, result.reason
    assert {"tolerance_edge", "edge_confirmed"} <= set(result.flags)
    assert result.correctness_trials == 7  # the first process's draws: the confirmation adds its own
    used = result.extra["confirm_tolerance_used"]
    assert len(used) == EvalConfig().confirm_edge and all(0.65 < u <= 0.7 for u in used)


def test_a_clear_pass_is_not_confirmed_and_confirm_edge_zero_confirms_none(shared_dir: Path, ext_root: Path) -> None:
    clear = _evaluate(program(1e-5), _cfg(), ext_root)
    assert clear.status is Status.OK and "edge_confirmed" not in clear.flags
    off = _evaluate(_per_process(shared_dir / "off"), _cfg(confirm_edge=0), ext_root)
    assert off.status is Status.OK and "tolerance_edge" in off.flags and "edge_confirmed" not in off.flags


def test_only_unrechecked_passes_at_the_edge_need_it() -> None:
    cfg = EvalConfig()
    edge = Evaluation("p", "c", Status.OK, flags=("tolerance_edge",))
    assert needs_confirmation(edge, cfg)
    assert not needs_confirmation(replace(edge, flags=("rechecked", "tolerance_edge")), cfg)  # fresh processes already
    assert not needs_confirmation(replace(edge, status=Status.INCORRECT), cfg)
    assert not needs_confirmation(replace(edge, flags=()), cfg)
    assert not needs_confirmation(edge, EvalConfig(confirm_edge=0))
    clocked = Evaluation("p", "c", Status.OK, flags=("reads_clock",))
    assert confirmations(clocked, EvalConfig()) == EvalConfig().confirm_clock == 2
    assert confirmations(clocked, EvalConfig(confirm_clock=0)) == 0
    assert confirmations(clocked, EvalConfig(confirm_clock=2)) == 2
    both = replace(clocked, flags=("reads_clock", "tolerance_edge"))
    assert confirmations(both, EvalConfig(confirm_edge=3, confirm_clock=1)) == 3
    # a re-measured pass ran in fresh processes with true clocks: its clock's confirmations remain
    assert confirmations(replace(both, flags=("reads_clock", "rechecked")), EvalConfig(confirm_clock=2)) == 2
    assert confirmations(replace(both, flags=("rechecked", "tolerance_edge")), EvalConfig()) == 0
