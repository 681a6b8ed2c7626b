"""A reference whose output depends on its earlier calls (KernelBench's L3-33/34 keep an RNN's hidden
state in ``self``): the reference worker must see the same calls as the candidate, or the reference
itself is "incorrect" (it was, at correctness trial 2, before the reference was reset per candidate)."""

from __future__ import annotations

from cudal1.candidates import Candidate, Status
from cudal1.evaluator import EvalConfig
from cudal1.evaluator.batch import evaluate_many
from cudal1.evaluator.core import evaluate_candidate
from cudal1.problems import Problem

RNN = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, n: int, hidden: int):
        super().__init__()
        self.hidden = torch.randn((4, hidden))
        self.i2h = nn.Linear(n + hidden, hidden)

    def forward(self, x):
        self.hidden = self.hidden.to(x.device)
        self.hidden = torch.tanh(self.i2h(torch.cat((x, self.hidden), dim=1)))
        return self.hidden * 2.0

def get_inputs():
    return [torch.randn(4, 32)]

def get_init_inputs():
    return [32, 16]
'''

# The same cell without the state: right on the first call only.
FORGETFUL = RNN + '''
class ModelNew(Model):
    def forward(self, x):
        start = self.hidden.to(x.device)
        return torch.tanh(self.i2h(torch.cat((x, start), dim=1))) * 2.0
'''

PROBLEM = Problem("stateful-rnn", 3, "stateful rnn", RNN, suite="test")


def test_a_stateful_reference_is_correct_against_itself() -> None:
    cfg = EvalConfig(device="cpu")
    itself = Candidate(PROBLEM.problem_id, RNN + "\nclass ModelNew(Model):\n    pass\n", origin="control")
    evaluation = evaluate_candidate(PROBLEM, itself, cfg)
    assert evaluation.status == Status.OK, evaluation.reason
    assert "stateful_reference" in evaluation.flags and evaluation.max_abs_error == 0.0


def test_each_candidate_of_a_batch_meets_a_fresh_reference_and_the_state_still_counts() -> None:
    """In a batch one reference worker serves every candidate of the problem: reset before each, the copy
    of the reference passes after another candidate used it, and a program that drops the state fails."""
    cfg = EvalConfig(device="cpu")
    itself = Candidate(PROBLEM.problem_id, RNN + "\nclass ModelNew(Model):\n    pass\n", origin="control")
    forgetful = Candidate(PROBLEM.problem_id, FORGETFUL, origin="control-forgetful")
    first, dropped, again = evaluate_many([PROBLEM], [itself, forgetful, itself], cfg)
    assert first.status == Status.OK and again.status == Status.OK, (first.reason, again.reason)
    assert dropped.status == Status.INCORRECT and "correctness trial 2" in dropped.reason
    # Loaded ahead, the later two made their first call there (core.load_candidate's first_call), which moved their
    # state on: built again before their trials, as fresh as the reference
    assert "first_call_s" in dropped.extra and "first_call_s" in again.extra


def test_a_restarted_reference_worker_gives_the_same_records() -> None:
    """``ReferenceSession.restart`` (room for a re-measurement that ran out of device memory) stops the
    worker, and the fresh one builds the same reference: same init seed, same outputs for the same seed."""
    from cudal1.evaluator.references import ReferenceSession
    from cudal1.problems import load_starter_suite

    problem = next(p for p in load_starter_suite() if "nn.Linear" in p.source)  # weights from the init seed
    with ReferenceSession(problem, EvalConfig(device="cpu")) as session:
        before = session.records([1234])[0]
        old = session.worker.proc.pid
        session.restart()
        assert session.worker.proc.pid != old
        after = session.records([1234])[0]
    assert before["outputs"] and len(before["outputs"]) == len(after["outputs"])
    for a, b in zip(before["outputs"], after["outputs"], strict=True):
        assert a.equal(b)
