"""A timed call's inputs, made without running the reference's Python, and what a worker's load prepares
from the trusted reference before any program code runs.

**The plan.** :func:`record` watches one ``get_inputs()`` (which factory draws it makes, with which sizes,
dtypes and devices) and, when the inputs are nothing but those draws, returns an :class:`InputPlan` that
replays them for any seed. Replaying calls the same factory functions on the same generators, seeded the
same way, so a replayed call's inputs are bit-identical to ``get_inputs()``'s for that seed: :func:`record`
checks this on two seeds before it hands a plan out and returns None otherwise (the worker then calls
``get_inputs`` as before). What it saves is the host's time per call (the ``torch.device`` context, which
sends every torch call inside it through Python, and the reference's own Python): on a GPU that time is
the harness's overhead beside small kernels.

**The graph.** On CUDA a timed call's inputs and L2 flush are one captured graph (:class:`GraphedInputs`):
the host's work per call before the timed forward becomes a seed and one graph launch, instead of a
launch per factory draw and one for the flush (each 10-25 us of host time). The graph replays the plan
into tensors that keep their addresses from call to call; every call overwrites all of them with the
draws of its own seed. Before it is used, :func:`capture` checks on two seeds that a replay gives tensors
bit-identical to the eager replay; when it does not, or capture fails, the worker keeps the eager path.
After a batch, :meth:`GraphedInputs.intact` says whether a program replaced or resized an input's storage
(the graph would then write where the tensors no longer are): the call that follows would see stale
inputs, so the batch is rejected. Where the harness's own draw kernels stand in for torch's generators
(device_draws.py), :class:`CountedInputs` replays their work instead, with no generator in the graph.

**The load's preparation** (:func:`prepare`): the plan, the L2 flush, the harness's draws (checked against
``get_inputs``'s) and the graph, made on the cores no device times on.

Imports torch and the standard library only: the GPU evaluation worker uses it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from cudal1.evaluator import device_draws
from cudal1.evaluator.device_draws import follow_offset
from cudal1.evaluator.probes import L2Flush

# --- the plan -------------------------------------------------------------------------------------------

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
    later draw from it raises "Offset increment outside graph capture" (L2-5 of CUDA-L1's H100 release). Seeding and setting the offset still work on it."""
    if default is not None and drawn is not None and default is not drawn:
        follow_offset(default, seed, drawn.get_offset())


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


# --- the graph ------------------------------------------------------------------------------------------

class GraphedInputs:
    """Replays a captured graph of a plan's draws (and the L2 flush) for a seed."""

    def __init__(self, graph: Any, made: list[torch.Tensor], plan: InputPlan, cpu_generator: torch.Generator,
                 device_generator: torch.Generator | None, follow: torch.Generator | None = None) -> None:
        self.graph, self.made, self.plan = graph, made, plan
        self.cpu_generator, self.follow = cpu_generator, follow
        self.device_generator: torch.Generator = device_generator  # type: ignore[assignment]  # None: CountedInputs
        self.storage = [t.untyped_storage().data_ptr() for t in made]
        self.shapes = [(t.shape, t.stride(), t.storage_offset()) for t in made]

    def draw(self, seed: int) -> list[Any]:
        """This seed's inputs, and the L2 flush queued behind them. Both generators are seeded as the
        eager draw seeds them; the replay reads the device generator's seed and advances its offset as
        the eager draws would, and the default generator follows it, so what runs next sees the same RNG
        state."""
        self.cpu_generator.manual_seed(seed)
        self.device_generator.manual_seed(seed)
        self.graph.replay()
        follow_state(self.follow, seed, self.device_generator)
        # Fresh tensor objects on the same memory: a program that rebinds or re-strides what it was given
        # (set_, .data =, as_strided_) changes its own object, not the one the next call hands out.
        return self.plan.assemble([t.detach() for t in self.made])

    def intact(self) -> bool:
        """Whether every input still lives where the graph writes it, with its shape."""
        return all(t.untyped_storage().data_ptr() == p and (t.shape, t.stride(), t.storage_offset()) == s
                   for t, p, s in zip(self.made, self.storage, self.shapes))


def capture(plan: InputPlan, device: torch.device, cpu_generator: torch.Generator,
            device_generator: torch.Generator | None, flush_buffer: torch.Tensor | None,
            seeds: tuple[int, int] = (24680, 13579), follow: torch.Generator | None = None) -> GraphedInputs | None:
    """A graph of ``plan``'s draws followed by ``flush_buffer.zero_()``, or None where it cannot stand in
    for the eager draws: not CUDA, a draw on another device (the eager path copies it), a capture that
    fails, or a replay that is not bit-identical to the eager draws on both ``seeds``. Runs at load,
    before any candidate code."""
    if device.type != "cuda" or device_generator is None:
        return None
    index = device.index if device.index is not None else torch.cuda.current_device()
    if any(kw["device"].type != "cuda" or kw["device"].index != index for _, _, kw in plan.draws):
        return None
    try:
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):  # first use of each kernel outside the capture, as torch advises
            plan.draw(seeds[0], cpu_generator, device_generator)
        torch.cuda.current_stream(device).wait_stream(side)
        torch.cuda.synchronize(device)
        graph = torch.cuda.CUDAGraph()
        if device_generator is not torch.cuda.default_generators[index]:
            graph.register_generator_state(device_generator)  # a capture registers only the default one
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            made = [func(*args, **explicit_generator(func, kwargs, cpu_generator, device_generator), **kwargs)
                    for func, args, kwargs in plan.draws]
            if flush_buffer is not None:
                flush_buffer.zero_()
        graphed = GraphedInputs(graph, made, plan, cpu_generator, device_generator, follow)
        for seed in seeds:
            replayed = [x.clone() if isinstance(x, torch.Tensor) else x for x in graphed.draw(seed)]
            torch.cuda.synchronize(device)
            if not identical(replayed, plan.draw(seed, cpu_generator, device_generator)):
                return None
        return graphed
    except Exception:  # noqa: BLE001 - any failure to capture keeps the eager path, which is always correct
        try:
            torch.cuda.synchronize(device)
        except Exception:  # noqa: BLE001 - a device in error fails the load right after, where it is reported
            pass
        return None


class CountedInputs(GraphedInputs):
    """Replays a captured graph of the harness kernels' work for a call (cudal1.evaluator.device_draws: the
    counter advanced and the previous call's staging copy, the draws) and the L2 flush: no torch generator
    is in the graph, so a replay is one launch."""

    def __init__(self, graph: Any, made: list[torch.Tensor], counted: Any) -> None:
        super().__init__(graph, made, counted.plan, counted.cpu_generator, None, counted.follow)
        self.counted = counted

    def draw(self, seed: int, pending: tuple[int, int, int] | None = None) -> list[Any]:
        """The batch's next inputs, and the L2 flush queued behind them; the generators as after
        ``get_inputs()`` for ``seed``. ``pending``: the previous call's staging copy (source, destination,
        bytes; fingerprints.Fingerprints.queue), made by the replay before anything else."""
        self.counted.kernels.hand(pending)  # every replay: never a copy an earlier one was handed
        self.cpu_generator.manual_seed(seed)
        self.graph.replay()
        follow_offset(self.follow, seed, self.counted.offset)
        return self.plan.assemble([t.detach() for t in self.made])  # fresh objects, as GraphedInputs.draw


def capture_counted(counted: Any, device: torch.device, flush_buffer: torch.Tensor | None,
                    seeds: tuple[int, int] = (24680, 13579)) -> CountedInputs | None:
    """A graph of a call's kernel work (``counted``'s draws) and ``flush_buffer.zero_()``, or None
    where capture fails or a replay is not bit-identical to the eager draws of the same call (two
    seeds, two calls each). Runs at load, before any candidate code."""
    kernels = counted.kernels
    try:
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            kernels.make(counted.plan, counted.draws)
        torch.cuda.current_stream(device).wait_stream(side)
        torch.cuda.synchronize(device)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            # first node: the previous output is copied before the draws or the flush touch anything
            made = kernels.make(counted.plan, counted.draws)
            if flush_buffer is not None:
                flush_buffer.zero_()
        graphed = CountedInputs(graph, made, counted)
        for seed in seeds:
            replayed = []
            counted.start(seed)
            for _ in range(2):
                replayed.append([x.clone() if isinstance(x, torch.Tensor) else x for x in graphed.draw(seed)])
            counted.start(seed)
            eager = [counted.inputs(seed) for _ in range(2)]
            torch.cuda.synchronize(device)
            if not all(identical(a, b) for a, b in zip(replayed, eager)):
                return None
        return graphed
    except Exception:  # noqa: BLE001 - any failure to capture keeps the eager draws, the same values
        try:
            torch.cuda.synchronize(device)
        except Exception:  # noqa: BLE001 - a device in error fails the load right after, where it is reported
            pass
        return None


# --- the load's preparation ---------------------------------------------------------------------------

@dataclass
class Prepared:
    plan: InputPlan | None  # get_inputs replayed without its Python
    l2: L2Flush
    counted: device_draws.Counted | None  # the plan drawn by the harness's kernels
    graphed: GraphedInputs | None  # the plan and the L2 flush as one CUDA graph
    draws_note: str  # why the harness's draws are not used ('' where they are, or were not asked for)


def prepare(get_inputs: Callable[[], list[Any]], device: torch.device,
            generators: tuple[torch.Generator, torch.Generator | None, torch.Generator | None] | None,
            flush_l2: bool, draws_path: str | None, stamps: dict[str, float]) -> Prepared:
    """The load's preparation for the reference's ``get_inputs`` on ``device``; ``generators`` (the CPU's,
    the harness's device generator, the device's default one) is None for a build worker, which times
    nothing (its warm-up call draws from get_inputs itself). ``draws_path``: the harness's draw kernels
    (device_draws.py), None to draw with get_inputs' own calls. The input graph is captured where it can
    stand in for the eager draws. Adds to ``stamps`` when each part ended."""
    plan = None
    try:
        if generators is not None:
            plan = record(get_inputs, device, generators[0], generators[1], default_generator=generators[2])
    except Exception:  # noqa: BLE001 - e.g. inputs that do not fit: get_inputs reports it where it always did
        if device.type == "cuda":
            torch.cuda.empty_cache()
    stamps["plan"] = time.perf_counter()
    l2 = L2Flush(device, flush_l2)
    counted, draws_note, captured = None, "", None
    if draws_path and plan is not None and generators[1] is not None:  # a plan: generators given
        # the timed calls' draws by the harness's kernels, checked against get_inputs' (device_draws.py)
        counted, draws_note = device_draws.prepare(draws_path, plan, device, *generators)
    stamps["draws"] = time.perf_counter()
    flush_buffer = l2.buf if l2.enabled else None
    if counted is not None:
        captured = capture_counted(counted, device, flush_buffer)
    elif plan is not None:
        captured = capture(plan, device, generators[0], generators[1], flush_buffer, follow=generators[2])
    stamps["graph"] = time.perf_counter()
    return Prepared(plan, l2, counted, captured, draws_note)
