"""The harness's draw kernels on the CPU machine: nvcc compiles them once per source (a second call reads
the cache), a plan's draws are described as the kernels make them or refused, the check against
get_inputs' draws catches a wrong distribution. What the kernels draw on a GPU is tested in
tests/gpu/test_gpu_draws.py."""

from __future__ import annotations

import time

import pytest
import torch

from cudal1.evaluator import device_draws
from cudal1.evaluator.config import EvalConfig
from cudal1.evaluator.inputs import record
from cudal1.evaluator.workers import draws_path


@pytest.mark.skipif(device_draws.nvcc() is None, reason="needs nvcc")
def test_the_kernels_compile_once_into_a_fatbin(tmp_path) -> None:
    path = device_draws.fatbin(tmp_path)
    assert path is not None and path.parent == tmp_path / ".draws"
    assert path.read_bytes()[:4] == bytes.fromhex("50ed55ba")  # a CUDA fatbin's magic number
    assert oct(path.stat().st_mode)[-3:] == "644" and not list(path.parent.glob("*.tmp"))
    t0 = time.perf_counter()
    again = device_draws._compile(tmp_path)  # another process: the file is found, nothing compiles
    assert again == path and time.perf_counter() - t0 < 1.0


def test_no_kernels_off_cuda() -> None:
    assert draws_path(EvalConfig(device="cpu")) is None


def _plan(get_inputs):
    gen = torch.Generator()
    return record(get_inputs, torch.device("cpu"), torch.default_generator, gen)


def test_a_plans_draws_as_the_kernels_make_them() -> None:
    def get_inputs():
        return [torch.randn(4, 8), torch.randint(10, (6,)), torch.randint(-2, 3, (5,), dtype=torch.int32),
                torch.rand(3, dtype=torch.float16), torch.zeros(2)]

    plan = _plan(get_inputs)
    assert plan is not None
    made = plan.made(1, torch.default_generator, None)
    draws = device_draws.describe(plan, [t.to("meta") for t in made])  # off the device: refused
    assert draws is None
    fake_cuda = [_OnCuda(t) for t in made]
    draws = device_draws.describe(plan, fake_cuda)
    assert draws is not None
    assert [(d.kind, d.shape, d.dtype, d.low, d.high) for d in draws] == [
        (0, (4, 8), torch.float32, 0, 0), (2, (6,), torch.int64, 0, 10), (2, (5,), torch.int32, -2, 3),
        (1, (3,), torch.float16, 0, 0), (None, (2,), torch.float32, 0, 0)]


def test_a_bool_draw_is_not_the_kernels() -> None:
    plan = _plan(lambda: [torch.randint(0, 2, (8,), dtype=torch.bool)])
    assert plan is not None
    made = [_OnCuda(t) for t in plan.made(1, torch.default_generator, None)]
    assert device_draws.describe(plan, made) is None


class _OnCuda:
    """A CPU tensor that says it lives on a CUDA device: describe() reads only its metadata."""

    def __init__(self, t: torch.Tensor) -> None:
        self.shape, self.dtype, self.device = t.shape, t.dtype, torch.device("cuda", 0)


def test_the_check_catches_a_wrong_distribution() -> None:
    normal = device_draws.Draw(0, (4096,), torch.float32)
    uniform = device_draws.Draw(1, (4096,), torch.float32)
    integer = device_draws.Draw(2, (4096,), torch.int64, -3, 7)
    g = torch.Generator().manual_seed(3)
    theirs = [torch.randn(4096, generator=g), torch.rand(4096, generator=g), torch.randint(-3, 7, (4096,), generator=g)]
    ours = [torch.randn(4096, generator=g), torch.rand(4096, generator=g), torch.randint(-3, 7, (4096,), generator=g)]
    draws = [normal, uniform, integer]
    assert device_draws.check(draws, ours, theirs) == ""
    assert "standard deviation" in device_draws.check(draws, [ours[0] * 1.2, *ours[1:]], theirs)
    assert "mean" in device_draws.check(draws, [ours[0] + 0.2, *ours[1:]], theirs)
    assert "outside" in device_draws.check(draws, [ours[0], ours[1] + 0.5, ours[2]], theirs)
    assert "outside" in device_draws.check(draws, [*ours[:2], ours[2] + 1], theirs)
    assert "4096" in device_draws.check(draws, [ours[0][:100], *ours[1:]], theirs)
    low_res = [device_draws.Draw(1, (4096,), torch.bfloat16)]  # 8 bits: torch's own mean is 0.498
    assert device_draws.check(low_res, [torch.rand(4096, generator=g, dtype=torch.bfloat16)],
                              [torch.rand(4096, generator=g, dtype=torch.bfloat16)]) == ""
