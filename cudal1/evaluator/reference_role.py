"""The reference role of an evaluation worker: records (inputs and outputs per seed) for the parent, and a
fresh model on demand for references whose output depends on earlier calls. A mixin of
:class:`cudal1.evaluator.worker.Worker`, split from it to keep that module readable, with
:func:`load_program`, how the worker runs either program as a module.

torch and the standard library only: the GPU evaluation worker imports it.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from typing import Any

import torch

from cudal1.evaluator.idle_device import IdleDevice
from cudal1.evaluator.probes import flatten

_manual_seed = torch.manual_seed  # bound at import, before any program runs


def load_program(path: str, name: str, file: str | None = None) -> types.ModuleType:
    """Run a program as a module. ``file`` is what it sees as ``__file__``: for a candidate, a path in its
    build cache (keyed by its source hash), so programs that build next to ``__file__`` (CUDA-L1's do)
    find their build there next time instead of compiling again in every fresh directory."""
    with open(path, encoding="utf-8") as handle:
        source = handle.read()
    module = types.ModuleType(name)
    module.__file__ = path
    if file:
        try:
            with open(file, "w", encoding="utf-8") as handle:
                handle.write(source)
            module.__file__ = file
        except OSError:
            pass
    sys.modules[name] = module  # some code (dataclasses, pickling, torch.compile) looks itself up here
    exec(compile(source, path, "exec"), module.__dict__)  # noqa: S102 - running it is the point
    return module


class ReferenceRole:
    """Methods of the worker that serve the trusted reference (never a candidate's code path)."""

    reference: Any
    model: Any
    init: tuple[Any, int] | None
    device: torch.device
    idle: IdleDevice | None = None  # made at the first batch that asks for it

    def idle_device(self, sync: Callable[[], None]) -> IdleDevice:
        """The probe of this worker's GPU that its timed batch first waits on, where the parent asks
        (idle_device.py): the reference's worker, while the candidate's process is stopped."""
        if self.idle is None:
            self.idle = IdleDevice(self.device, sync)
        return self.idle

    def reference_outputs(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Reference role only: inputs and outputs for each seed, sent to the parent."""
        records = []
        for seed in msg["seeds"]:
            inputs = self._inputs_for(seed)
            originals = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
            out = self._forward(inputs)
            self._sync()
            structure, outputs = flatten(out)
            records.append({
                "seed": seed,
                "inputs": originals,
                "outputs": [o.detach() if isinstance(o, torch.Tensor) else o for o in outputs],
                "structure": structure,
            })
        return {"ok": True, "count": len(records)} | self._ship(records, msg.get("out_path"))

    def reset(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Build the model from its init seed: as fresh as when loaded (a stateful reference is reset so
        that its calls match the next candidate's, one for one)."""
        assert self.reference is not None and self.init is not None
        cls, seed = self.init
        _manual_seed(seed)
        init_inputs = self.reference.get_init_inputs()
        _manual_seed(seed)
        with torch.no_grad():
            model = cls(*init_inputs)
        if isinstance(model, torch.nn.Module):
            model = model.to(self.device)
        self.model = model
        self._sync()
        return {"ok": True}

    def _stateful(self) -> bool:
        """Whether the output depends on earlier calls (KernelBench's RNNs keep their hidden state in
        self): two calls on the same inputs give different sums. The state the probe moved on needs no
        undoing here: the parent resets a stateful reference before each candidate (core._correctness)."""
        try:
            # A float64 sum read straight from each output (no float64 copy of an 8 GB output)
            sums = [[o.sum(dtype=torch.complex128 if o.is_complex() else torch.float64).item()
                     if isinstance(o, torch.Tensor) else o
                     for o in flatten(self._forward(self._inputs_for(0)))[1]] for _ in range(2)]
        except Exception:  # noqa: BLE001 - the first record reports the reference's error where it always did
            return False
        return sums[0] != sums[1]
