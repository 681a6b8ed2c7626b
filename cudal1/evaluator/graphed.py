"""A timed call's inputs and L2 flush as one captured CUDA graph: the host's work per call before the
timed forward becomes a seed and one graph launch, instead of a launch per factory draw and one for the
flush (each 10-25 us of host time on an H100 host, docs/gpu-runs.md).

The graph replays an :class:`~cudal1.evaluator.inputs.InputPlan` (the reference's ``get_inputs`` as
factory draws) into tensors that keep their addresses from call to call; every call overwrites all of
them with the draws of its own seed. Before it is used, :func:`capture` checks on two seeds that a
replay gives tensors bit-identical to the eager replay (itself checked against ``get_inputs``); when it
does not, or capture fails, the worker keeps the eager path. After a batch, :meth:`GraphedInputs.intact`
says whether a program replaced or resized an input's storage (the graph would then write where the
tensors no longer are): the call that follows would see stale inputs, so the batch is rejected.

Imports torch and the standard library only: the GPU evaluation worker uses it.
"""

from __future__ import annotations

from typing import Any

import torch

from cudal1.evaluator.inputs import InputPlan, explicit_generator, follow_offset, follow_state, identical


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
