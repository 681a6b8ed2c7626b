"""On the device: a reference worker kept from one reward-shaped batch to the next (references.KeptReferences) serves the next
call on the GPU with the same verdicts, and a candidate that cheats is still caught against it.

Run on the device machine: ``PYTHONPATH=. python -m pytest -m gpu tests/gpu``.
"""

from __future__ import annotations

import pytest
import torch

from cudal1.candidates import Candidate, Status
from cudal1.evaluator import EvalConfig
from cudal1.evaluator.batch import evaluate_many
from cudal1.evaluator.references import KeptReferences
from cudal1.problems import load_starter_suite

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

# the learning protocol of benchmarks/learning_gpu.py
CONFIG = EvalConfig(device="cuda:0", correctness_trials=2, timing_trials=3, target_trial_ms=10.0, warmup_iters=1,
                    remeasure=0)


def _correct(source: str, tag: str) -> str:
    return source.replace("class Model(", "class ModelNew(") + f"\n# {tag}\n"


def test_a_kept_reference_serves_the_next_call_on_the_gpu() -> None:
    problems = load_starter_suite()[:2]
    with KeptReferences() as kept:
        first = evaluate_many(problems, [Candidate(p.problem_id, _correct(p.source, "1")) for p in problems],
                              CONFIG, references=kept)
        pids = sorted(s.worker.pid for s in kept._held.values())
        # a program that returns zeros after its first call: wrong, against the kept reference too
        p = problems[0]
        lazy = _correct(p.source, "2").replace("class ModelNew(", "class _Real(") + (
            "\nclass ModelNew(_Real):\n    calls = 0\n"
            "    def forward(self, *args):\n"
            "        ModelNew.calls += 1\n"
            "        out = super().forward(*args)\n"
            "        return out if ModelNew.calls < 2 else torch.zeros_like(out)\n")
        second = evaluate_many(problems, [Candidate(p.problem_id, lazy),
                                          Candidate(problems[1].problem_id, _correct(problems[1].source, "2"))],
                               CONFIG, references=kept)
        assert kept.taken == 2 and sorted(s.worker.pid for s in kept._held.values()) == pids
    assert all(e.status == Status.OK for e in first), [e.reason for e in first]
    by_problem = {e.problem_id: e for e in second}
    assert by_problem[problems[0].problem_id].status == Status.INCORRECT, by_problem[problems[0].problem_id].reason
    assert by_problem[problems[1].problem_id].status == Status.OK, by_problem[problems[1].problem_id].reason
