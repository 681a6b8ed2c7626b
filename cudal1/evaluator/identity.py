"""What the worker checks by identity after every command (:meth:`cudal1.evaluator.worker.Worker.violations`):
the torch and standard-library functions a candidate must not replace (:data:`GUARDED`), and the harness's
own functions outside :mod:`cudal1.evaluator.worker` (:func:`harness_code`; the worker adds its own
methods and helpers in ``worker._own_code``). Split from :mod:`cudal1.evaluator.worker`.

torch and the standard library only: the GPU evaluation worker imports it.
"""

from __future__ import annotations

import builtins
import json
import os
import socket
import time
from typing import Any

import torch

from cudal1.evaluator import device_draws, inputs, pace, probes, transport
from cudal1.evaluator.probes import Fingerprints, L2Flush

# What a candidate must not replace: checked for identity after every command.
GUARDED = {
    "time.perf_counter": lambda: time.perf_counter,
    "time.monotonic": lambda: time.monotonic,
    "time.time": lambda: time.time,
    "torch.cuda.synchronize": lambda: torch.cuda.synchronize,
    "torch._C._cuda_synchronize": lambda: getattr(torch._C, "_cuda_synchronize", None),
    "torch.cuda.Event": lambda: torch.cuda.Event,
    "torch.cuda.Event.record": lambda: torch.cuda.Event.record,
    "torch.cuda.Event.elapsed_time": lambda: torch.cuda.Event.elapsed_time,
    "torch.cuda.Event.synchronize": lambda: torch.cuda.Event.synchronize,
    "torch.cuda.CUDAGraph.replay": lambda: torch.cuda.CUDAGraph.replay,
    "torch.allclose": lambda: torch.allclose,
    "torch.equal": lambda: torch.equal,
    "torch.save": lambda: torch.save,
    "torch.load": lambda: torch.load,
    "torch.Tensor.__eq__": lambda: torch.Tensor.__eq__,
    "torch.Tensor.to": lambda: torch.Tensor.to,
    "torch.Tensor.clone": lambda: torch.Tensor.clone,
    "torch.Tensor.copy_": lambda: torch.Tensor.copy_,
    "torch.Tensor.detach": lambda: torch.Tensor.detach,
    "torch.Tensor.cpu": lambda: torch.Tensor.cpu,
    "torch.nn.Module.__call__": lambda: torch.nn.Module.__call__,
    "builtins.type": lambda: builtins.type,
    "builtins.isinstance": lambda: builtins.isinstance,
    "json.dumps": lambda: json.dumps,
    "os.write": lambda: os.write,
    "socket.send_fds": lambda: socket.send_fds,
    "transport.Mapping.allocate": lambda: vars(transport.Mapping)["allocate"],  # the classmethod object itself
}

# The probes the worker calls, checked both as its own names and as the probes module's.
PROBES = ("Fingerprints", "inspect_outputs", "flatten", "to_device", "global_flags", "precision_flags",
          "lowered_precision")


def harness_code() -> dict[str, Any]:
    """The harness's own methods and helpers outside worker.py, in the order ``worker._own_code`` has always
    listed them (after the worker's own)."""
    names: dict[str, Any] = {}
    names.update({f"probes.{n}": getattr(probes, n) for n in PROBES})
    names.update({f"transport.{n}": getattr(transport, n) for n in ("pack", "ship", "_describe")})
    names.update({f"L2Flush.{n}": getattr(L2Flush, n) for n in ("__call__", "heat", "_persisting", "reset_persisting",
                                                                     "after_replay")})
    names["InputPlan.draw"] = inputs.InputPlan.draw
    names.update({f"inputs.{n}": getattr(inputs, n) for n in ("explicit_generator", "follow_state")})
    names.update({f"GraphedInputs.{n}": getattr(inputs.GraphedInputs, n) for n in ("draw", "intact")})
    names["CountedInputs.draw"] = inputs.CountedInputs.draw
    names.update({f"InputPlan.{n}": getattr(inputs.InputPlan, n) for n in ("made", "assemble")})
    names["device_draws.follow_offset"] = device_draws.follow_offset
    names.update({f"Counted.{n}": getattr(device_draws.Counted, n) for n in ("start", "inputs")})
    names.update({f"DeviceDraws.{n}": getattr(device_draws.DeviceDraws, n) for n in ("start", "fill", "begin", "make", "_launch",
                                                                                "hand", "sums")})
    names.update({f"Fingerprints.{n}": getattr(Fingerprints, n) for n in ("add", "queue", "record", "values", "_order", "_pattern",
                                                                         "_weights", "_flush", "_rows", "_kernel_sums")})
    names["pace.probe_ms"] = pace.probe_ms  # the host's pace around a timed batch (host_pace_ms)
    return names
