"""Outputs too large to stage twice, summed where they lie by the harness's kernel
(fingerprints.Fingerprints._in_place), and the draw kernel's four values per Philox block (draws.cu).

Run on the device machine: ``PYTHONPATH=. python -m pytest -m gpu tests/gpu``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import torch

from cudal1.evaluator.config import EvalConfig
from cudal1.evaluator.fingerprints import Fingerprints
from cudal1.evaluator.inputs import CountedInputs
from cudal1.evaluator.worker import Worker
from cudal1.evaluator.workers import draws_path

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

CUDA = torch.device("cuda:0")

SOURCE = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x, y, k):
        return {kind}

def get_inputs():
    return [torch.randn({n}), torch.rand({n}, dtype=torch.float16), torch.randint(-5, 9, ({n},))]

def get_init_inputs():
    return []
'''


def _worker(kind: str, n: int) -> Worker:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "reference.py"
        path.write_text(SOURCE.replace("{kind}", kind).replace("{n}", str(n)))
        worker = Worker("cuda:0", 1, flush_l2=True)
        reply = worker.load({"role": "reference", "reference_path": str(path), "init_seed": 0,
                             "device_draws": draws_path(EvalConfig(device="cuda:0"))})
        assert reply["ok"], reply
    return worker


def _staged(prints: Fingerprints, outputs: list[torch.Tensor], seed: int) -> None:
    """A call staged (copied, then summed) as before the in-place sums: queue() without the seed."""
    prints.record(prints.queue(outputs)[0], seed)


def test_in_place_sums_are_the_staged_sums_bit_for_bit() -> None:
    """An output over half the staging budget, summed where it lies, gives the sums its one-row staged copy
    gave, bit for bit, for each float dtype and a transposed layout; calls that still stage (a small output,
    an integer one) keep their place in the table between them."""
    kernels = _worker("x * 1", 4096).counted
    assert kernels is not None
    gen = torch.Generator(device="cuda").manual_seed(9)
    big = [torch.randn((300, 517), generator=gen, device="cuda").to(dtype)
           for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64)]
    big.append(torch.randn((517, 300), generator=gen, device="cuda").t())  # dense, not contiguous
    small = torch.randn(64, generator=gen, device="cuda")
    ints = torch.randint(-9, 9, (300, 517), generator=gen, device="cuda")
    sequence = [[big[0]], [small], [big[1]], [big[2], big[3]], [ints], [big[4]], [small], [big[0]]]
    budget = 2 * 300 * 517 * 2 - 1  # a float16 output of 300 x 517 is over half of it; `small` is not
    ours = Fingerprints(CUDA, 5, calls=len(sequence), stage_bytes=budget, kernels=kernels.kernels)
    theirs = Fingerprints(CUDA, 5, calls=len(sequence), stage_bytes=budget, kernels=kernels.kernels)
    for seed, outputs in enumerate(sequence, start=300):
        ours.add(outputs, seed)
        _staged(theirs, outputs, seed)
        if seed == 300:  # the first large output took no staging buffer
            assert ours.stage == [] and len(theirs.stage) == 1
    assert ours.values() == theirs.values()


def test_in_place_sums_read_the_output_before_the_next_call_overwrites_it() -> None:
    """One buffer rewritten for every call (an output that is an input the next call's draws overwrite):
    each call's sums are of its own values, as with a fresh tensor per call; and one changed element of
    one call changes that call's fingerprint only."""
    kernels = _worker("x * 1", 4096).counted
    assert kernels is not None
    values = [torch.full((1 << 20,), float(i), device="cuda") + torch.arange(1 << 20, device="cuda") for i in range(5)]
    buf = torch.empty(1 << 20, device="cuda")
    reused = Fingerprints(CUDA, 3, calls=5, stage_bytes=1 << 20, kernels=kernels.kernels)
    fresh = Fingerprints(CUDA, 3, calls=5, stage_bytes=1 << 20, kernels=kernels.kernels)
    for seed, v in enumerate(values):
        buf.copy_(v)
        reused.add([buf], seed)
        fresh.add([v.clone()], seed)
    assert reused.stage == [] and reused.seeds == []  # nothing staged: every call summed where it lay
    a = reused.values()
    assert a == fresh.values()
    values[3][77] += 1
    other = Fingerprints(CUDA, 3, calls=5, stage_bytes=1 << 20, kernels=kernels.kernels)
    for seed, v in enumerate(values):
        other.add([v], seed)
    b = other.values()
    assert b[3] != a[3] and b[:3] == a[:3] and b[4] == a[4]


@pytest.mark.parametrize("kind", ["x.mul_(2)", "x * y.float() + k"], ids=["input-returned", "fresh"])
def test_a_workers_large_outputs_fingerprint_alike_on_graph_and_eager_draws(kind: str) -> None:
    """A timed batch of 160 MB outputs (summed in place): the graph path, whose next replay overwrites an
    input the program returned, fingerprints as the eager path, which draws fresh tensors each call."""
    n = 40_000_000
    graph_worker, eager_worker = _worker(kind, n), _worker(kind, n)
    assert isinstance(graph_worker.graphed, CountedInputs)
    eager_worker.graphed = None
    msg = {"cmd": "time", "warmup_seeds": [], "seeds": list(range(60, 66)), "spot": [], "print_key": 4,
           "device_draws": True}
    a, b = graph_worker.time_trial(msg), eager_worker.time_trial(msg)
    assert not a["problems"] and not b["problems"]
    assert a["fingerprints"] == b["fingerprints"]
    assert len({str(call) for call in a["fingerprints"]}) == 6  # every call drew and summed its own values


def test_the_draws_four_values_a_block_are_independent_normals_and_uniforms() -> None:
    """Both Box-Muller outputs of a pair, and the pairs of a block, are standard normals without
    correlation between neighbours (of the values or their squares: a radius drawn once for two pairs
    would show there); uniforms and integers cover their range; an odd length's tail is drawn."""
    worker = _worker("x * 1", 4_000_003)
    counted = worker.counted
    assert counted is not None
    counted.start(17)
    x, y, k = counted.inputs(3)
    torch.cuda.synchronize()
    x64 = x.double()
    assert abs(x64.mean().item()) < 0.005 and abs(x64.std().item() - 1) < 0.005
    for lag in (1, 2, 3, 4):
        a, b = x64[:-lag], x64[lag:]
        assert abs(torch.corrcoef(torch.stack([a, b]))[0, 1].item()) < 0.005, lag
        assert abs(torch.corrcoef(torch.stack([a * a, b * b]))[0, 1].item()) < 0.005, lag
    assert x[-3:].abs().sum().item() > 0 and torch.isfinite(x).all()
    assert 0 <= y.min().item() and y.max().item() < 1 and abs(y.double().mean().item() - 0.5) < 0.005
    assert k.min().item() == -5 and k.max().item() == 8 and len(torch.unique(k)) == 14
