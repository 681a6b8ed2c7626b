"""The harness's own draw kernels (cudal1/evaluator/device_draws.py) on the GPU: a worker loads them and
captures them with the L2 flush; a replay is one launch with no refill of a torch generator; every call
draws new values with the reference's distributions; two workers given the same batch draw the same
inputs; and a whole evaluation runs on them.

Run on the device machine: ``PYTHONPATH=. python -m pytest -m gpu tests/gpu``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from cudal1.candidates import Candidate, Status
from cudal1.evaluator import device_draws
from cudal1.evaluator.config import EvalConfig
from cudal1.evaluator.core import evaluate_candidate
from cudal1.evaluator.inputs import CountedInputs
from cudal1.evaluator.worker import Worker
from cudal1.evaluator.workers import draws_path
from cudal1.problems import Problem, load_starter_suite

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

MIXED = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, a, b, c, d, e, f):
        return a.float().sum() + b.float().sum() + c.sum() + d.float().sum() + e.float().sum() + f.sum()

def get_inputs():
    return [torch.randn(64, 1000), torch.randn(300, dtype=torch.float16), torch.rand(50000, dtype=torch.float64),
            torch.rand(4096, dtype=torch.bfloat16), torch.randint(-3, 7, (10000,)), torch.ones(5)]

def get_init_inputs():
    return []
'''


def _worker(source: str) -> Worker:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "reference.py"
        path.write_text(source)
        worker = Worker("cuda:0", 1, flush_l2=True)
        reply = worker.load({"role": "reference", "reference_path": str(path), "init_seed": 0,
                             "device_draws": draws_path(EvalConfig(device="cuda:0"))})
        assert reply["ok"], reply
    return worker


def test_the_kernels_draw_the_references_distributions_and_replay_as_one_launch() -> None:
    worker = _worker(MIXED)
    assert worker.counted is not None and isinstance(worker.graphed, CountedInputs)
    graph, counted = worker.graphed, worker.counted
    counted.start(11)
    first = [x.clone() for x in graph.draw(5)]
    second = [x.clone() for x in graph.draw(6)]
    torch.cuda.synchronize()
    theirs = worker.plan.made(5, torch.default_generator, worker.generator)  # type: ignore[union-attr]
    assert device_draws.check(counted.draws, first, theirs) == ""
    assert device_draws.check(counted.draws, second, theirs) == ""
    for a, b in zip(first[:5], second[:5]):
        assert not torch.equal(a, b)  # every call draws new values
    assert torch.equal(first[5], torch.ones(5, device="cuda"))
    assert int(first[4].min()) == -3 and int(first[4].max()) == 6
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for seed in range(20):
            graph.draw(seed)
        torch.cuda.synchronize()
    names = [e.key for e in prof.key_averages()]
    assert "cudaGraphLaunch" in names or any("Graph" in n for n in names)
    assert "aten::fill_" not in names  # no generator state refilled before the replays


def test_two_workers_given_the_same_batch_draw_the_same_inputs() -> None:
    a, b = _worker(MIXED), _worker(MIXED)
    assert a.counted is not None and b.counted is not None
    msg = {"cmd": "time", "warmup_seeds": [1], "seeds": [21, 22, 23, 24], "spot": [], "print_key": 3,
           "device_draws": True}
    ra, rb = a.time_trial(msg), b.time_trial(msg)
    assert ra["fingerprints"] == rb["fingerprints"] and not ra["problems"]
    other = a.time_trial(msg | {"seeds": [31, 32, 33, 34]})
    assert other["fingerprints"] != ra["fingerprints"]
    torch_draws = a.time_trial(msg | {"device_draws": False})  # the parent's choice: torch's generators
    assert torch_draws["fingerprints"] != ra["fingerprints"] and not torch_draws["problems"]


def test_a_draw_outside_the_kernels_keeps_torchs_generators() -> None:
    source = MIXED.replace("torch.ones(5)]", "torch.randint(0, 2, (5,), dtype=torch.bool)]")
    worker = _worker(source)
    assert worker.plan is not None and worker.counted is None and worker.graphed is not None
    assert not isinstance(worker.graphed, CountedInputs)


@pytest.mark.parametrize("problem", load_starter_suite()[:8], ids=lambda p: p.problem_id)
def test_starter_problems_evaluate_on_the_kernels_draws(problem: Problem) -> None:
    """A problem's own reference as the candidate: ok near 1x, timed on the kernels' draws wherever its
    get_inputs is factory draws."""
    config = EvalConfig(device="cuda:0", timing_trials=3, remeasure=0, run_timeout_s=60, build_timeout_s=300)
    candidate = Candidate(problem.problem_id, problem.source.replace("class Model(", "class ModelNew("), "test")
    evaluation = evaluate_candidate(problem, candidate, config)
    assert evaluation.status == Status.OK, evaluation.error
    plan = _worker(problem.source).plan
    assert ("device_draws" in evaluation.flags) == (plan is not None)
    # the figures that say why a reading is off (pytest's repr of the evaluation cuts them): one H100 read
    # starter-L1-1 (a 256 x 256 matmul, launch-bound) at 0.45x here once, 2026-11-28 (docs/gpu-runs.md at 88f971b)
    why = {k: evaluation.extra.get(k) for k in ("trial_ms", "trial_pace_ms", "contended_trials", "iters_per_trial")}
    assert 0.5 < (evaluation.speedup or 0) < 2.0, f"{evaluation.speedup}x, flags {evaluation.flags}, {why}"


ALIASED = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x, h):
        return {kind}

def get_inputs():
    return [torch.randn(1001), torch.randn(333, dtype=torch.float16)]

def get_init_inputs():
    return []
'''


@pytest.mark.parametrize("kind", ["x.mul_(2)", "x[1:] * 1", "x[1:]", "h[1:]", "x.view(7, 143).t()", "h.float()"],
                         ids=["input-returned", "fresh", "offset-4", "offset-2", "transposed", "converted"])
def test_the_graphs_staging_copy_is_the_immediate_copy(kind: str) -> None:
    """The previous output copied by the next replay's first node (16-, 4- or 1-byte path, an output that
    is the input the draws overwrite next) fingerprints as a copy made right after the call does. No spot
    checks: those reject an output that aliases an input, which would end the batch early."""
    source = ALIASED.replace("{kind}", kind)
    graph_worker, eager_worker = _worker(source), _worker(source)
    assert isinstance(graph_worker.graphed, CountedInputs)
    eager_worker.graphed = None  # the kernels' draws, each output copied at once
    msg = {"cmd": "time", "warmup_seeds": [], "seeds": list(range(40, 52)), "spot": [], "print_key": 8,
           "device_draws": True}
    a, b = graph_worker.time_trial(msg), eager_worker.time_trial(msg)
    assert not a["problems"] and not b["problems"]
    assert a["fingerprints"] == b["fingerprints"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64])
def test_the_kernels_fingerprint_sums_are_torchs(dtype: torch.dtype) -> None:
    """The fingerprint sums in one float64 pass (device_draws.DeviceDraws.sums) agree with torch's
    reductions of the same staged calls within the rounding compare_fingerprints allows, for contiguous,
    transposed and channels-last outputs, and differ where one element of one call does."""
    from cudal1.evaluator.probes import ACCUMULATION, Fingerprints

    worker = _worker(MIXED)
    assert worker.counted is not None
    gen = torch.Generator(device="cuda").manual_seed(4)
    shapes = [(37, 515), (8, 3, 17, 19)]
    for shape in shapes:
        base = torch.randn(shape, generator=gen, device="cuda") * 3
        calls = [(base + i).to(dtype) for i in range(6)]
        layouts = [lambda t: t, lambda t: t.transpose(0, 1)]
        if len(shape) == 4:
            layouts.append(lambda t: t.contiguous(memory_format=torch.channels_last))
        for layout in layouts:
            ours = Fingerprints(torch.device("cuda"), 77, calls=6, kernels=worker.counted.kernels)
            theirs = Fingerprints(torch.device("cuda"), 77, calls=6)
            for seed, out in enumerate(calls):
                ours.add([layout(out)], 1000 + seed)
                theirs.add([layout(out)], 1000 + seed)
            a, b = ours.values(), theirs.values()
            for call_a, call_b in zip(a, b):
                for (n1, *sums1), (n2, *sums2) in zip(call_a, call_b):
                    assert n1 == n2
                    scale = sums1[1]  # sum |x|
                    for x, y in zip(sums1[:3], sums2[:3]):
                        assert abs(x - y) <= 2 * ACCUMULATION * scale + 1e-9
            changed = [c.clone() for c in calls]
            changed[2].view(-1)[5] += 1
            other = Fingerprints(torch.device("cuda"), 77, calls=6, kernels=worker.counted.kernels)
            for seed, out in enumerate(changed):
                other.add([layout(out)], 1000 + seed)
            diff = other.values()
            assert diff[2] != a[2] and diff[:2] == a[:2] and diff[3:] == a[3:]
