"""The input replay plan (cudal1/evaluator/inputs.py): handed out only when the replay is bit-identical to
get_inputs, never for inputs that are more than factory draws, and used by the worker for every call."""

from __future__ import annotations

import types

import pytest
import torch

from cudal1.evaluator import inputs
from cudal1.evaluator.worker import Worker
from cudal1.problems import load_problems

GEN = torch.default_generator


def _module(source: str) -> types.ModuleType:
    module = types.ModuleType("reference")
    exec(source, module.__dict__)  # noqa: S102 - trusted test sources
    return module


def _seeded(get_inputs, seed: int) -> list:
    GEN.manual_seed(seed)
    return list(get_inputs())


@pytest.mark.parametrize("problem", load_problems("starter"), ids=lambda p: p.problem_id)
def test_replay_is_bit_identical_or_absent(problem) -> None:
    module = _module(problem.source)
    plan = inputs.record(module.get_inputs, torch.device("cpu"), GEN, None)
    if plan is None:  # starter-L1-4 scales its draw: more than a factory call, get_inputs stays
        assert problem.problem_id == "starter-L1-4"
        return
    for seed in (1, 2, 99991):
        replayed, original = plan.draw(seed, GEN, None), _seeded(module.get_inputs, seed)
        assert len(replayed) == len(original)
        for a, b in zip(replayed, original):
            assert torch.equal(a, b) and a.dtype == b.dtype and a.stride() == b.stride()


@pytest.mark.parametrize("source", [
    "import torch\ndef get_inputs():\n    return [torch.randn(4, 4).abs()]\n",                 # a further op
    "import torch\ndef get_inputs():\n    x = torch.randn(8)\n    x.mul_(2)\n    return [x]\n",   # in place
    "import torch\ng = torch.Generator()\ndef get_inputs():\n    return [torch.randn(4, generator=g)]\n",
    "import torch\ndef get_inputs():\n    return [torch.tensor([1.0, 2.0])]\n",                 # not a draw
    "import torch\ndef get_inputs():\n    return torch.randn(4)\n",                             # not a list
    "import torch\ndef get_inputs():\n    return [torch.randn(4, requires_grad=True)]\n",
])
def test_no_plan_for_more_than_draws(source: str) -> None:
    assert inputs.record(_module(source).get_inputs, torch.device("cpu"), GEN, None) is None


def test_constants_and_mixed_draws_replay() -> None:
    source = ("import torch\ndef get_inputs():\n    a = torch.randint(0, 10, (5,), dtype=torch.int32)\n"
              "    torch.rand(3)\n    return [torch.randn(2, 3), 7, a, None, torch.full((2,), 1.5)]\n")
    module = _module(source)
    plan = inputs.record(module.get_inputs, torch.device("cpu"), GEN, None)
    assert plan is not None
    replayed, original = plan.draw(5, GEN, None), _seeded(module.get_inputs, 5)
    assert replayed[1] == 7 and replayed[3] is None and replayed[2].dtype == torch.int32
    assert all(torch.equal(a, b) for a, b in zip(replayed, original) if isinstance(a, torch.Tensor))


def test_nondeterministic_inputs_get_no_plan() -> None:
    """A get_inputs whose draws do not follow the seed (its own unseeded generator state) fails the check."""
    source = ("import torch, itertools\n_n = itertools.count()\n"
              "def get_inputs():\n    return [torch.full((3,), float(next(_n)))]\n")
    assert inputs.record(_module(source).get_inputs, torch.device("cpu"), GEN, None) is None


def test_worker_draws_timed_inputs_from_the_plan(tmp_path) -> None:
    problem = next(p for p in load_problems("starter") if p.problem_id == "starter-L1-1")
    path = tmp_path / "reference.py"
    path.write_text(problem.source)
    worker = Worker("cpu", 1, flush_l2=False)
    assert worker.load({"role": "reference", "reference_path": str(path), "init_seed": 0})["ok"]
    assert worker.plan is not None
    drawn = worker._inputs_for(42)
    expected = _seeded(worker.reference.get_inputs, 42)
    assert all(torch.equal(a, b) for a, b in zip(drawn, expected))


def test_inputs_stay_eager_off_cuda(tmp_path) -> None:
    """A load captures the input graph where it can; off CUDA there is none, and the eager plan times the
    calls (the graph itself is checked on the GPU, tests/gpu/test_gpu_timing.py)."""
    problem = next(p for p in load_problems("starter") if p.problem_id == "starter-L1-1")
    path = tmp_path / "reference.py"
    path.write_text(problem.source)
    worker = Worker("cpu", 1, flush_l2=False)
    reply = worker.load({"role": "reference", "reference_path": str(path), "init_seed": 0})
    assert reply["ok"] and reply["graphed"] is False and worker.graphed is None and worker.plan is not None
    timed = worker.time_trial({"cmd": "time", "warmup_seeds": [1], "seeds": [5, 6, 7], "spot": [], "print_key": 3})
    assert timed["ok"] and not timed["problems"] and len(timed["fingerprints"]) == 3


def test_calls_per_trial_count_whole_iterations_not_the_last_call(tmp_path) -> None:
    """Each timed call draws the next call's inputs, so the last one, which draws none, says nothing of what
    a call costs: it is left out of ``call_ms``, which sets the calls per trial (timing.calls_per_trial; on a
    CPU its 0.05-0.8 ms set them for 1.4-3.6 ms calls). A two-call calibration batch reports one whole
    iteration."""
    problem = next(p for p in load_problems("starter") if p.name == "ReLU")
    path = tmp_path / "reference.py"
    path.write_text(problem.source)
    worker = Worker("cpu", 1, flush_l2=False)
    assert worker.load({"role": "reference", "reference_path": str(path), "init_seed": 0})["ok"]
    batch = worker.time_trial({"cmd": "time", "warmup_seeds": [1], "seeds": [5, 6, 7, 8], "spot": [], "print_key": 3})
    assert len(batch["ms"]) == 4 and len(batch["call_ms"]) == 3, batch["call_ms"]
    calibration = worker.time_trial({"cmd": "time", "warmup_seeds": [1], "seeds": [9, 10], "spot": [], "print_key": 4})
    assert len(calibration["call_ms"]) == 1
    # the iteration holds the first call's timed forward and the draw of the second call's inputs
    assert calibration["call_ms"][0] > calibration["ms"][0], calibration
