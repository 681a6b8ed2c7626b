"""The isolated worker: one process runs ONE program (a reference or a candidate) and nothing else.

The process around a :class:`Worker` (limits, CPU pinning, the command loop on private pipes) is
:mod:`cudal1.evaluator.worker_main`; its timed batch is :mod:`cudal1.evaluator.timed`. Inputs never travel:
both workers generate them from the seed the parent sends, with the reference's ``get_inputs``. Tensors
that go back to the parent travel as exported device memory, or on CPU as ``torch.save`` files the parent
reads with ``weights_only=True`` (:mod:`cudal1.evaluator.transport`).

After every command the worker checks by identity that the program replaced none of the torch and
standard-library functions the harness relies on (:data:`GUARDED`) and none of the harness's own
(:func:`_own_code`), and that it changed no global state that alters what is measured.

This module imports torch and the standard library only: it is the GPU evaluation worker.
"""

from __future__ import annotations

import builtins
import json
import os
import socket
import sys
import threading
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from cudal1.evaluator import device_draws, extensions, inputs, probes, timed, transport
from cudal1.evaluator.clock_skew import install as skew_clocks
from cudal1.evaluator.inputs import GraphedInputs, InputPlan, prepare
from cudal1.evaluator.probes import (
    Fingerprints,
    L2Flush,
    flatten,
    global_flags,
    inspect_outputs,
    lowered_precision,
    precision_flags,
    same_layout,
    to_device,
    uses_compile,
)
from cudal1.evaluator.sandbox import on_cores
from cudal1.evaluator.timed import IdleDevice, device_sync, time_batch

# The harness seeds inputs through its own reference to manual_seed, taken before any candidate code runs:
# torch._dynamo (torch.compile) legitimately wraps torch.manual_seed on import, so it is not guarded by
# identity; a candidate that replaced it would only change its own inputs, which the fingerprints catch.
_manual_seed = torch.manual_seed
_cpu_generator = torch.default_generator
_empty_cache = torch.cuda.empty_cache  # bound before any program runs, like the two above

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
# What the timed batch calls, checked as the timed module's names (its functions and those it imports)
TIMED = ("time_batch", "_drawer", "_timed_calls", "probe_ms", "device_sync", "no_sync", "Fingerprints", "flatten",
         "inspect_outputs")


def _own_code() -> dict[str, Any]:
    """The harness's own methods and helpers: a candidate that wraps them (found through gc or sys.modules)
    to rewrite replies is caught by identity, like a patched torch function."""
    names = {f"Worker.{n}": getattr(Worker, n) for n in ("load", "run", "time_trial", "reference_outputs",
                                                         "_forward", "_inputs_for", "_sync", "_ship", "violations")}
    module = sys.modules[__name__]
    names.update({f"worker.{n}": getattr(module, n) for n in (*PROBES, "device_sync", "time_batch")})
    names.update({f"timed.{n}": getattr(timed, n) for n in TIMED})
    names.update({f"probes.{n}": getattr(probes, n) for n in PROBES})
    names.update({f"transport.{n}": getattr(transport, n) for n in ("pack", "ship", "_describe")})
    names.update({f"L2Flush.{n}": getattr(L2Flush, n) for n in ("__call__", "heat", "_persisting", "reset_persisting",
                                                                     "after_replay")})
    names["InputPlan.draw"] = InputPlan.draw
    names.update({f"inputs.{n}": getattr(inputs, n) for n in ("explicit_generator", "follow_state")})
    names.update({f"GraphedInputs.{n}": getattr(inputs.GraphedInputs, n) for n in ("draw", "intact")})
    names["CountedInputs.draw"] = inputs.CountedInputs.draw
    names.update({f"InputPlan.{n}": getattr(InputPlan, n) for n in ("made", "assemble")})
    names["device_draws.follow_offset"] = device_draws.follow_offset
    names.update({f"Counted.{n}": getattr(device_draws.Counted, n) for n in ("start", "inputs")})
    names.update({f"DeviceDraws.{n}": getattr(device_draws.DeviceDraws, n) for n in ("start", "fill", "begin", "make",
                                                                                "_launch", "hand", "sums")})
    names.update({f"Fingerprints.{n}": getattr(Fingerprints, n) for n in ("add", "queue", "record", "values", "_order",
                                                                         "_pattern", "_weights", "_flush", "_rows",
                                                                         "_kernel_sums")})
    return names


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


class Worker:
    """One program's worker: its commands (load, run, warm, time, reference, reset, probe) and the
    integrity snapshot they are checked against."""

    def __init__(self, device: str, threads: int, flush_l2: bool, fd_sock: socket.socket | None = None,
                 spare_cores: set[int] | None = None) -> None:
        self.device = torch.device(device)
        # Inputs are drawn from a device generator of the harness's own; the device's default one only
        # follows it (inputs.follow_state): a program can break the default one for good.
        self.generator: torch.Generator | None = None
        self.default_generator: torch.Generator | None = None
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
            torch.zeros(1, device=self.device)  # the context, and with it the device's default generator
            self.default_generator = torch.cuda.default_generators[torch.cuda.current_device()]
            self.generator = torch.Generator(device=self.device)
        torch.set_num_threads(threads)
        self.flush_l2 = flush_l2
        self.reference: types.ModuleType | None = None
        self.model: torch.nn.Module | None = None
        self.previous_inputs: list[Any] | None = None
        self.guards: dict[str, Any] = {}
        self.own: dict[str, Any] = {}
        self.flags: dict[str, Any] = {}
        self.precision: dict[str, Any] = {}
        self.threads: set[int | None] = set()  # idents of the threads alive at the snapshot
        self.init: tuple[Any, int] | None = None  # (class, init seed) the model is built from
        self.l2: L2Flush | None = None
        self.keep: list[Any] = []  # device memory exported to the parent, held until the next command
        self.fd_sock = fd_sock
        self.builds: extensions.BuildLog | None = None  # a candidate's calls of torch's extension builder
        self.plan: InputPlan | None = None  # get_inputs replayed without its Python (cudal1.evaluator.inputs)
        self.graphed: GraphedInputs | None = None  # the plan and the L2 flush as one CUDA graph
        self.counted: device_draws.Counted | None = None  # the plan drawn by the harness's kernels
        self.compile_warmed = False  # torch.compile's own start made (warm_compile)
        self.spare_cores = spare_cores  # a GPU worker's cores away from its timed one (worker_main)
        self.idle: IdleDevice | None = None  # the reference's probe of its device, made at its first batch

    # --- integrity -------------------------------------------------------------------------------
    def _snapshot(self) -> None:
        self.guards = {k: get() for k, get in GUARDED.items()}
        self.own = _own_code()
        self.flags = global_flags()
        self.precision = precision_flags()
        self.threads = {t.ident for t in threading.enumerate()}

    def violations(self) -> dict[str, list[str]]:
        patched = [k for k, get in GUARDED.items() if get() is not self.guards.get(k)]
        patched += [k for k, v in _own_code().items() if v is not self.own.get(k)]
        now = global_flags()
        changed = [f"{k}: {self.flags[k]} -> {now[k]}" for k in self.flags if now[k] != self.flags[k]]
        # Name the new threads (Python names one after its target): which library started one, if any
        new = [t.name for t in threading.enumerate() if t.ident not in self.threads]
        changed = [f"{c} (new: {', '.join(new)})" if c.startswith("python_threads") and new else c for c in changed]
        prec = precision_flags()
        precision = [f"{k}: {self.precision[k]} -> {prec[k]}" for k in self.precision if prec[k] != self.precision[k]]
        return {"patched": patched, "changed": changed, "precision": precision,
                "lowered": lowered_precision(self.precision, prec)}

    def _sync(self) -> None:
        if self.device.type == "cuda":
            device_sync()  # device-wide: work a candidate left on side streams counts

    # --- commands ----------------------------------------------------------------------------------
    def load(self, msg: dict[str, Any]) -> dict[str, Any]:
        t0 = time.perf_counter()
        build_only = bool(msg.get("build_only"))  # a build worker: its only product is the build cache
        # The harness's preparation on the spare cores, back on the timed core before any program code runs
        with on_cores(self.spare_cores if not build_only else None):
            self.reference = load_program(msg["reference_path"], "cudal1_reference")
            if self.device.type == "cuda":
                torch.zeros(1, device=self.device)  # create the context before the snapshot
            compile_start = None  # where torch.compile's own start was made: at the worker's start, or here
            if msg["role"] == "candidate" and not build_only and uses_compile(msg["candidate_path"]):
                compile_start = "start" if self.compile_warmed else "load"
                self.warm_compile()
            builds = msg["role"] == "candidate" and extensions.mentions_builds(
                Path(msg["candidate_path"]).read_text(encoding="utf-8", errors="replace"))
            if builds and not build_only:
                extensions.builder()  # torch's builder imported here, for install below (0.1 s alone)
            # where the load's preparation goes (reply's prep_s; "reference" holds the builder's import too)
            stamps = {"reference": time.perf_counter()}
            ready = prepare(self.reference.get_inputs, self.device, None if build_only else (
                _cpu_generator, self.generator, self.default_generator), self.flush_l2, msg.get("device_draws"), stamps)
        self.plan, self.l2, self.counted, self.graphed = ready.plan, ready.l2, ready.counted, ready.graphed
        if msg.get("clock_skew") and msg["role"] == "candidate":  # a confirmation deciding its race (clock_skew.py)
            skew_clocks(msg["clock_skew"])
        self._snapshot()
        if msg["role"] == "candidate":
            if builds:
                self.builds = extensions.install(os.environ.get("TORCH_EXTENSIONS_DIR"))
            imported = time.perf_counter()
            module = load_program(msg["candidate_path"], "cudal1_candidate", msg.get("module_file"))
            import_s = time.perf_counter() - imported  # the program's own import, its builds included
            cls = getattr(module, "ModelNew", None)
            if cls is None:
                return {"ok": False, "kind": "rejected", "error": "the candidate defines no class ModelNew"}
        else:
            cls, import_s = self.reference.Model, 0.0
        build_s = time.perf_counter() - t0
        self.init = (cls, msg["init_seed"])
        self.reset({})
        stateful = msg["role"] == "reference" and not build_only and self._stateful()
        return {"ok": True, "build_s": build_s, "load_s": time.perf_counter() - t0 - build_s,
                "graphed": self.graphed is not None, "stateful": stateful, "compile_start": compile_start,
                "device_draws": self.counted is not None, "import_s": round(import_s, 3),
                "prep_s": {k: round(v - u, 3) for (k, v), u in zip(stamps.items(), [t0, *stamps.values()])}} | (
                    {"device_draws_note": ready.draws_note} if ready.draws_note else {})

    def warm_compile(self) -> None:
        """torch.compile's own start, before the snapshot and before any program code (probes.warm_compile)."""
        if not self.compile_warmed:
            probes.warm_compile(self.device)
            self.compile_warmed = True

    def _inputs_for(self, seed: int) -> list[Any]:
        """The reference's own get_inputs (never the candidate's), seeded, created on the device: GPU
        generation is cheap enough to give every timed call contents no earlier call has seen."""
        assert self.reference is not None
        if self.plan is not None:
            return list(to_device(self.plan.draw(seed, _cpu_generator, self.generator, self.default_generator),
                                  self.device))
        # The CPU generator and this device's, seeded directly: torch.manual_seed also walks every other
        # device and backend, a tenth of a millisecond that every timed call would pay.
        _cpu_generator.manual_seed(seed)
        if self.default_generator is not None:
            self.default_generator.manual_seed(seed)
        with torch.device(self.device):
            inputs = self.reference.get_inputs()
        return list(to_device(inputs, self.device))

    def _forward(self, inputs: list[Any]) -> Any:
        assert self.model is not None
        with torch.no_grad():
            return self.model(*inputs)

    def _ship(self, obj: Any, out_path: str | None) -> dict[str, Any]:
        return transport.ship(obj, out_path, self.device.type == "cuda", self.keep, self.fd_sock)

    def probe(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Send a known tensor: the parent checks that device memory reaches it (before any program loads)."""
        return {"ok": True} | self._ship({"probe": torch.arange(1000, dtype=torch.float32, device=self.device)},
                                         msg.get("out_path"))

    def warm(self, msg: dict[str, Any]) -> dict[str, Any]:
        """One forward, nothing sent back: a build worker runs it so builds a program starts on its first
        call land in the cache before the program is timed; a batch's load ahead makes the first call
        there. ``release``: the call's memory goes back to the driver, as a worker loaded ahead waits
        beside the candidate being checked."""
        self._forward(self._inputs_for(msg["seed"]))
        self._sync()
        if msg.get("release") and self.device.type == "cuda":
            _empty_cache()
        return {"ok": True}

    def run(self, msg: dict[str, Any]) -> dict[str, Any]:
        """One correctness trial on inputs generated from the parent's seed (the parent checks they are
        bit-identical to the reference's); optionally copied into the last trial's buffers."""
        fresh = self._inputs_for(msg["seed"])
        if msg.get("reuse") and self.previous_inputs is not None and same_layout(self.previous_inputs, fresh):
            for old, new in zip(self.previous_inputs, fresh):
                if isinstance(old, torch.Tensor):
                    old.copy_(new)  # same addresses, new contents: defeats caches keyed on data_ptr
            inputs = self.previous_inputs
        else:
            inputs = fresh
        self.previous_inputs = inputs
        self._sync()
        t0 = time.perf_counter()
        out = self._forward(inputs)
        self._sync()
        forward_ms = (time.perf_counter() - t0) * 1e3
        structure, outputs = flatten(out)
        problems = inspect_outputs(outputs, inputs, self.device)
        payload = {
            "outputs": [o.detach() if isinstance(o, torch.Tensor) else o for o in outputs] if not problems else [],
            "inputs_after": [x.detach() if isinstance(x, torch.Tensor) else x for x in inputs],
        }
        return {"ok": True, "structure": structure, "problems": problems, "forward_ms": forward_ms} | \
            self._ship(payload, msg.get("out_path"))

    def time_trial(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Timed calls on fresh inputs each (:func:`cudal1.evaluator.timed.time_batch`)."""
        return time_batch(self, msg)

    # --- the reference's role (never a candidate's code path) --------------------------------------------
    def idle_device(self, sync: Callable[[], None]) -> IdleDevice:
        """The probe of this worker's GPU that its timed batch first waits on, where the parent asks
        (timed.IdleDevice): the reference's worker, while the candidate's process is stopped."""
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
