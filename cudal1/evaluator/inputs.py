"""A timed call's inputs drawn without running the reference's Python: :func:`record` watches one
``get_inputs()`` (which factory draws it makes, with which sizes, dtypes and devices) and, when the
inputs are nothing but those draws, returns an :class:`InputPlan` that replays them for any seed.

Replaying calls the same factory functions on the same generators, seeded the same way, so a replayed
call's inputs are bit-identical to ``get_inputs()``'s for that seed: :func:`record` checks this on two
seeds before it hands a plan out and returns None otherwise (the worker then calls ``get_inputs`` as
before). What it saves is the host's time per call (the ``torch.device`` context, which sends every
torch call inside it through Python, and the reference's own Python): on a GPU that time is the
harness overhead beside small kernels.

Imports torch and the standard library only: the GPU evaluation worker uses it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

# Draws a plan may replay: each makes a new tensor from sizes, scalars and a dtype alone.
_FACTORIES = {torch.randn, torch.rand, torch.randint, torch.zeros, torch.ones, torch.full}
_KWARGS = {"dtype", "device", "requires_grad", "layout", "pin_memory"}


class _Recorder(TorchFunctionMode):
    """Every torch call made while active, with its arguments and result."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[Any, tuple, dict, Any]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204 (torch's protocol)
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self.calls.append((func, args, dict(kwargs), out))
        return out


def _plain(value: Any) -> bool:
    """A size or scalar argument: ints, floats, bools and (nested) tuples or lists of them, torch.Size."""
    if isinstance(value, (bool, int, float)):
        return True
    if isinstance(value, (tuple, list, torch.Size)):
        return all(_plain(v) for v in value)
    return False


@dataclass(frozen=True)
class InputPlan:
    """The factory draws of one ``get_inputs()`` in order, each with its device and dtype made explicit,
    and how the returned list is assembled from them (an index into the draws, or a constant)."""

    draws: tuple[tuple[Any, tuple, dict], ...]
    items: tuple[tuple[bool, Any], ...]  # (is a draw, draw index or the constant itself)
    is_list: bool

    def draw(self, seed: int, cpu_generator: torch.Generator, device_generator: torch.Generator | None,
             follow: torch.Generator | None = None) -> list[Any]:
        """This seed's inputs, as ``get_inputs()`` gives them after the same seeding. Random draws on the
        device come from ``device_generator`` (the worker's own, see :func:`follow_state`); ``follow``,
        the device's default generator, is then left where ``get_inputs()`` would leave it."""
        made = self.made(seed, cpu_generator, device_generator)
        follow_state(follow, seed, device_generator)
        return self.assemble(made)

    def made(self, seed: int, cpu_generator: torch.Generator, device_generator: torch.Generator | None) -> list[Any]:
        """The draws themselves, in order, for this seed (what :meth:`assemble` puts together)."""
        cpu_generator.manual_seed(seed)
        if device_generator is not None:
            device_generator.manual_seed(seed)
        return [func(*args, **explicit_generator(func, kwargs, cpu_generator, device_generator), **kwargs)
                for func, args, kwargs in self.draws]

    def assemble(self, made: list[Any]) -> list[Any]:
        """``get_inputs()``'s list from the draws: each item a draw or the constant it returned."""
        return [made[v] if is_draw else v for is_draw, v in self.items]


_RANDOM = {torch.randn, torch.rand, torch.randint}


def explicit_generator(func: Any, kwargs: dict, cpu_generator: torch.Generator,
                       device_generator: torch.Generator | None) -> dict[str, torch.Generator]:
    """The generator a random draw names explicitly: the CPU's default, or the worker's own device one."""
    if func not in _RANDOM:
        return {}
    if kwargs["device"].type == "cpu":
        return {"generator": cpu_generator}
    return {"generator": device_generator} if device_generator is not None else {}


def follow_state(default: torch.Generator | None, seed: int, drawn: torch.Generator | None) -> None:
    """Put the device's default generator where the same draws from it would have left it (the seed, and
    the offset ``drawn`` reached), so the forward that follows sees the RNG state ``get_inputs()`` leaves.

    The harness draws from a generator of its own because a program may break the default one: a CUDA
    graph capture that fails inside a forward leaves the default generator marked as capturing, and every
    later draw from it raises "Offset increment outside graph capture" (L2-5 of CUDA-L1's H100 release;
    benchmarks/capture_rng.py). Seeding and setting the offset still work on it."""
    if default is not None and drawn is not None and default is not drawn:
        follow_offset(default, seed, drawn.get_offset())


def follow_offset(default: torch.Generator | None, seed: int, offset: int) -> None:
    """As :func:`follow_state`, for draws that did not come from a torch generator: the default generator
    left at ``seed`` and the offset ``get_inputs()``'s draws reach (recorded once at load)."""
    if default is None:
        return
    default.manual_seed(seed)
    default.set_offset(offset)


def _plan(calls: list[tuple[Any, tuple, dict, Any]], result: Any) -> InputPlan | None:
    if not isinstance(result, (list, tuple)):
        return None
    draws, index = [], {}
    for func, args, kwargs, out in calls:
        if func not in _FACTORIES or not _plain(args) or set(kwargs) - _KWARGS or "generator" in kwargs:
            return None
        if type(out) is not torch.Tensor or out.requires_grad or not out.is_contiguous():
            return None
        explicit = {k: v for k, v in kwargs.items() if k in ("layout", "pin_memory")}
        draws.append((func, tuple(args), explicit | {"dtype": out.dtype, "device": out.device}))
        index[id(out)] = len(draws) - 1
    items = []
    for item in result:
        if isinstance(item, torch.Tensor):
            if id(item) not in index:
                return None  # made by something other than a recorded draw
            items.append((True, index[id(item)]))
        elif item is None or isinstance(item, (bool, int, float, str)):
            items.append((False, item))
        else:
            return None
    return InputPlan(tuple(draws), tuple(items), isinstance(result, list))


def identical(a: list[Any], b: list[Any]) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
            if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)):
                return False
            if (x.shape, x.dtype, x.device, x.stride()) != (y.shape, y.dtype, y.device, y.stride()):
                return False
            if not torch.equal(x, y):
                return False
        elif type(x) is not type(y) or x != y:
            return False
    return True


def record(get_inputs: Any, device: torch.device, cpu_generator: torch.Generator,
           device_generator: torch.Generator | None, seeds: tuple[int, int] = (12345, 67890),
           default_generator: torch.Generator | None = None) -> InputPlan | None:
    """A replay plan of ``get_inputs`` on ``device``, or None when its inputs are more than factory draws
    or the replay (drawing from ``device_generator``) is not bit-identical to it (drawing from the device's
    ``default_generator``, the same one when not given) on both ``seeds``, checked here every time.
    Exceptions (inputs that do not fit) propagate: the caller falls back to get_inputs, which reports them."""
    default = default_generator if default_generator is not None else device_generator

    def original(seed: int) -> list[Any]:
        cpu_generator.manual_seed(seed)
        if default is not None:
            default.manual_seed(seed)
        with torch.device(device):
            return list(get_inputs())

    cpu_generator.manual_seed(seeds[0])
    if default is not None:
        default.manual_seed(seeds[0])
    recorder = _Recorder()
    with torch.device(device), recorder:
        result = get_inputs()
    plan = _plan(recorder.calls, result)
    del recorder, result  # at most two sets of inputs alive at once below
    if plan is None:
        return None
    for seed in seeds:
        if not identical(plan.draw(seed, cpu_generator, device_generator), original(seed)):
            return None
    return plan
