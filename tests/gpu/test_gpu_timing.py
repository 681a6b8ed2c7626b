"""The timed loop's device-side work: inputs generated on the GPU follow the reference's own
distribution, fingerprints taken on the GPU agree with the CPU's, and a timed batch reports one event
time per call with nothing read back before the batch ends.

Run on the device machine: ``PYTHONPATH=. python -m pytest -m gpu tests/gpu``.
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

import pytest
import torch

from cudal1.evaluator.compare import compare_fingerprints
from cudal1.evaluator.config import EvalConfig
from cudal1.evaluator.probes import ACCUMULATION, fingerprint
from cudal1.evaluator.worker import Worker
from cudal1.problems import load_starter_suite

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def _worker(source: str, graphed: bool = False) -> Worker:
    """A reference worker on the GPU; ``graphed``: as loaded, with its input graph, else on the eager
    draws (the graph dropped, as where it cannot be captured)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "reference.py"
        path.write_text(source)
        worker = Worker("cuda:0", 1, flush_l2=True)
        assert worker.load({"role": "reference", "reference_path": str(path), "init_seed": 0})["ok"]
    if not graphed:
        worker.graphed = None
    return worker


@pytest.mark.parametrize("problem", load_starter_suite()[:8], ids=lambda p: p.problem_id)
def test_device_inputs_follow_the_references_distribution(problem) -> None:
    """The timed calls' inputs come from the reference's get_inputs under the device: same shapes and
    dtypes as on the CPU, and the same moments (mean and standard deviation within sampling error)."""
    worker = _worker(problem.source)
    on_gpu = worker._inputs_for(7)
    torch.manual_seed(7)
    on_cpu = worker.reference.get_inputs()  # type: ignore[union-attr]
    assert len(on_gpu) == len(on_cpu)
    for g, c in zip(on_gpu, on_cpu):
        if not isinstance(c, torch.Tensor):
            assert g == c
            continue
        assert g.device.type == "cuda" and g.shape == c.shape and g.dtype == c.dtype
        if c.is_floating_point() and c.numel() > 1000:
            g64, c64 = g.double().cpu(), c.double()
            tol = 6 * float(c64.std()) / c.numel() ** 0.5 + 1e-6
            assert abs(float(g64.mean()) - float(c64.mean())) < tol
            assert abs(float(g64.std()) / float(c64.std()) - 1) < 0.05


def test_device_fingerprints_agree_with_the_cpu() -> None:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(1024, 1024, generator=gen)
    cfg = EvalConfig()
    on_cpu, on_gpu = fingerprint([x], 123, key=5), fingerprint([x.cuda()], 123, key=5)
    # Same pattern only where both devices draw it alike: the plain sums must agree either way, within
    # the float32 rounding that compare_fingerprints allows (ACCUMULATION of sum |x|).
    assert on_cpu[0][0] == on_gpu[0][0]
    abs_sum = on_cpu[0][2]
    for a, b in zip(on_cpu[0][1:3], on_gpu[0][1:3]):
        assert abs(a - b) <= ACCUMULATION * abs_sum
    assert compare_fingerprints(on_gpu, fingerprint([x.cuda() + 1e-7], 123, key=5), ["float32"], cfg) == ""
    assert compare_fingerprints(on_gpu, fingerprint([torch.zeros_like(x).cuda()], 123, key=5), ["float32"], cfg)


def test_device_fingerprints_do_not_depend_on_the_layout() -> None:
    """A channels_last or transposed output is staged in its memory order (a plain copy, the cost of a
    contiguous one) and fingerprinted as its contiguous twin is, within float32 rounding."""
    x = torch.randn(4, 16, 30, 30, device="cuda")
    cfg = EvalConfig()
    base = fingerprint([x], 77, key=3)
    for other in (x.contiguous(memory_format=torch.channels_last), x.transpose(1, 3).contiguous().transpose(1, 3)):
        assert compare_fingerprints(base, fingerprint([other], 77, key=3), ["float32"], cfg) == ""
    assert compare_fingerprints(base, fingerprint([x.transpose(2, 3).contiguous()], 77, key=3), ["float32"], cfg)


def test_timed_batch_reports_one_time_per_call() -> None:
    problem = load_starter_suite()[0]
    worker = _worker(problem.source)
    seeds = list(range(40))
    host = worker.time_trial({"cmd": "time", "warmup_seeds": [1], "seeds": seeds, "spot": [], "print_key": 9})
    assert len(host["ms"]) == len(seeds) and statistics.median(host["ms"]) > 0  # the host's clock, per call
    spot_path = Path(tempfile.mkdtemp()) / "spot.pt"
    reply = worker.time_trial({"cmd": "time", "warmup_seeds": [1], "seeds": seeds, "spot": [3], "print_key": 9,
                               "spot_path": str(spot_path)})
    assert reply["ok"] and not reply["problems"]
    assert len(reply["ms"]) == len(seeds) == len(reply["fingerprints"])
    assert statistics.median(reply["ms"]) > 0
    assert host["fingerprints"] == reply["fingerprints"]  # a spot check changes nothing else
    again = worker.time_trial({"cmd": "time", "warmup_seeds": [], "seeds": seeds, "spot": [], "print_key": 9})
    assert again["fingerprints"] == reply["fingerprints"]  # deterministic given the seeds and key


def _graphed_worker(source: str) -> Worker:
    return _worker(source, graphed=True)


@pytest.mark.parametrize("problem", load_starter_suite()[:8], ids=lambda p: p.problem_id)
def test_graphed_inputs_are_the_eager_draws_and_flush(problem) -> None:
    """A replay of the captured graph gives, for every seed, the eager plan's inputs bit for bit, and
    zeroes the L2 buffer; where the plan is absent there is no graph."""
    worker = _graphed_worker(problem.source)
    if worker.plan is None:
        assert worker.graphed is None
        return
    assert worker.graphed is not None, f"{problem.problem_id}: no graph for a plan of device draws"
    assert worker.l2 is not None and worker.l2.buf is not None
    for seed in (3, 4, 2**31 - 5):
        worker.l2.buf.fill_(1.0)
        replayed = [x.clone() if isinstance(x, torch.Tensor) else x for x in worker.graphed.draw(seed)]
        torch.cuda.synchronize()
        assert float(worker.l2.buf.abs().max()) == 0.0
        eager = worker.plan.draw(seed, torch.default_generator, worker.generator)
        for a, b in zip(replayed, eager):
            assert (torch.equal(a, b) and a.stride() == b.stride()) if isinstance(a, torch.Tensor) else a == b


def test_graphed_batch_fingerprints_equal_the_eager_batch() -> None:
    problem = load_starter_suite()[0]
    worker = _graphed_worker(problem.source)
    assert worker.graphed is not None
    msg = {"cmd": "time", "warmup_seeds": [1], "seeds": list(range(30)), "spot": [], "print_key": 11}
    graphed = worker.time_trial(msg)
    worker.graphed = None
    eager = worker.time_trial(msg)
    assert graphed["ok"] and not graphed["problems"] and graphed["fingerprints"] == eager["fingerprints"]


def test_a_resized_input_is_caught() -> None:
    """A program that resizes an input's storage moves it away from where the graph writes: the batch is
    reported, not timed on stale inputs."""
    worker = _graphed_worker(load_starter_suite()[0].source)
    graph = worker.graphed
    assert graph is not None and graph.intact()
    x = next(t for t in graph.draw(5) if isinstance(t, torch.Tensor))
    x.resize_(x.numel() * 64)
    assert not graph.intact()


def _break_default_generator() -> None:
    """A capture that fails part-way, as L2-5's program's forward does: torch leaves the device's default
    generator marked as capturing, and every later draw from it raises."""
    graph, x = torch.cuda.CUDAGraph(), torch.ones(4, device="cuda")
    with pytest.raises(Exception):  # noqa: B017 - torch's error class for it varies between releases
        with torch.cuda.graph(graph):
            (x * 2).sum().item()
    with pytest.raises(RuntimeError, match="Offset increment outside graph capture"):
        torch.randn(4, device="cuda")


@pytest.mark.parametrize("graphed", [True, False], ids=["graph", "eager"])
def test_inputs_survive_a_programs_failed_capture(graphed: bool) -> None:
    """The harness draws from a generator of its own, so a program that breaks the default one still gets
    the same inputs, and the default generator is left where get_inputs would leave it."""
    problem = load_starter_suite()[0]
    worker = _graphed_worker(problem.source) if graphed else _worker(problem.source)
    assert worker.plan is not None and (worker.graphed is not None) == graphed
    default = worker.default_generator
    assert default is not None and worker.generator is not default

    def draw(seed: int) -> list[torch.Tensor]:
        made = worker.graphed.draw(seed) if worker.graphed is not None else worker._inputs_for(seed)
        return [x.clone() for x in made if isinstance(x, torch.Tensor)]

    before, state = draw(7), default.get_state()
    try:
        _break_default_generator()
        after = draw(7)
        assert all(torch.equal(a, b) for a, b in zip(before, after)) and len(before) == len(after)
        assert torch.equal(default.get_state(), state)
    finally:
        default.graphsafe_set_state(default.clone_state())  # mended for the tests that follow
    # where the reference's own get_inputs leaves it, as before the harness drew from its own generator
    torch.default_generator.manual_seed(7)
    default.manual_seed(7)
    with torch.device("cuda"):
        worker.reference.get_inputs()
    assert torch.equal(default.get_state(), state)
