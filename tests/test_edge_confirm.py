"""A pass near its tolerance is checked again in a fresh process (EvalConfig.confirm_edge, recheck.confirm):
a program whose error is set per process (L2-27's on the GPU) passes or fails a whole run at once, so more
draws in one process cannot make its verdict repeat. Real workers on the CPU, through the batch."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from cudal1.candidates import Candidate, Evaluation, Status
from cudal1.evaluator import EvalConfig
from cudal1.evaluator.batch import evaluate_many
from cudal1.evaluator.recheck import needs_confirmation
from tests.edge_problem import PROBLEM, REFERENCE, program


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


def test_a_steady_pass_near_the_edge_is_confirmed_and_keeps_its_figures(ext_root: Path) -> None:
    result = _evaluate(program(7e-5), _cfg(), ext_root)
    assert result.status is Status.OK, result.reason
    assert {"tolerance_edge", "edge_confirmed"} <= set(result.flags)
    assert result.correctness_trials == 7  # the first process's draws: the confirmation adds its own
    [used] = result.extra["confirm_tolerance_used"]
    assert 0.65 < used <= 0.7


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
