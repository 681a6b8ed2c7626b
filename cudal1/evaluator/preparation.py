"""What a worker's load prepares from the trusted reference before any program code runs: the inputs plan
(``get_inputs`` replayed without its Python, checked bit-identical), the L2 flush, the harness's own draws
(checked against ``get_inputs``'s) and the input graph. Split from :mod:`cudal1.evaluator.worker`, whose
``load`` runs it, on the cores no device times on.

torch and the standard library only: the GPU evaluation worker imports it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from cudal1.evaluator import device_draws, graphed, inputs
from cudal1.evaluator.probes import L2Flush


@dataclass
class Prepared:
    plan: inputs.InputPlan | None  # get_inputs replayed without its Python (cudal1.evaluator.inputs)
    l2: L2Flush
    counted: device_draws.Counted | None  # the plan drawn by the harness's kernels
    graphed: graphed.GraphedInputs | None  # the plan and the L2 flush as one CUDA graph
    draws_note: str  # why the harness's draws are not used ('' where they are, or were not asked for)


def prepare(get_inputs: Callable[[], list[Any]], device: torch.device,
            generators: tuple[torch.Generator, torch.Generator | None, torch.Generator | None] | None,
            flush_l2: bool, draws_path: str | None, stamps: dict[str, float]) -> Prepared:
    """The load's preparation for the reference's ``get_inputs`` on ``device``; ``generators`` (the CPU's,
    the harness's device generator, the device's default one) is None for a build worker, which times
    nothing (its warm-up call draws from get_inputs itself). ``draws_path``: the harness's draw kernels
    (device_draws.py), None to draw with get_inputs' own calls. The input graph is captured where it can
    stand in for the eager draws (graphed.py). Adds to ``stamps`` when each part ended."""
    plan = None
    try:
        if generators is not None:
            plan = inputs.record(get_inputs, device, generators[0], generators[1], default_generator=generators[2])
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
        captured = graphed.capture_counted(counted, device, flush_buffer)
    elif plan is not None:
        captured = graphed.capture(plan, device, generators[0], generators[1], flush_buffer, follow=generators[2])
    stamps["graph"] = time.perf_counter()
    return Prepared(plan, l2, counted, captured, draws_note)
