"""The isolated worker: one process runs ONE program (a reference or a candidate) and nothing else.

The process around a :class:`Worker` (limits, CPU pinning, the command loop on private pipes) is
:mod:`cudal1.evaluator.worker_main`. Inputs never travel:
both workers generate them from the seed the parent sends, with the reference's ``get_inputs``. Tensors
that go back to the parent travel by CUDA IPC, or on CPU as ``torch.save`` files the parent reads with
``weights_only=True`` (:mod:`cudal1.evaluator.transport`).

This module imports torch and the standard library only: it is the GPU evaluation worker.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
import types
from pathlib import Path
from typing import Any

import torch

from cudal1.evaluator import device_draws, extensions, probes, transport
from cudal1.evaluator.clock_skew import install as skew_clocks
from cudal1.evaluator.cores import on_cores
from cudal1.evaluator.identity import GUARDED as _GUARDED
from cudal1.evaluator.identity import PROBES as _PROBES
from cudal1.evaluator.identity import harness_code
from cudal1.evaluator.inputs import CountedInputs, GraphedInputs, InputPlan, prepare
from cudal1.evaluator.pace import probe_ms
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
from cudal1.evaluator.reference_role import ReferenceRole, load_program

# The harness seeds inputs through its own reference to manual_seed, taken before any candidate code runs:
# torch._dynamo (torch.compile) legitimately wraps torch.manual_seed on import, so it is not guarded by
# identity; a candidate that replaced it would only change its own inputs, which the fingerprints catch.
_manual_seed = torch.manual_seed
_cpu_generator = torch.default_generator
# The current device's synchronize, taken before any candidate code runs (the worker sets its device
# first): torch.cuda.synchronize wraps it in a device guard and a lazy-init check, ~5 us a call on the
# H100 host, twice a timed call. Guarded by identity (identity.GUARDED) like the public function.
_device_sync = torch._C._cuda_synchronize if hasattr(torch._C, "_cuda_synchronize") else None


_empty_cache = torch.cuda.empty_cache  # bound before any program runs, like the two above


def _no_sync() -> None:
    """A CPU device: calls are synchronous."""


def _own_code() -> dict[str, Any]:
    """The harness's own methods and helpers (the worker's here, then :func:`identity.harness_code`'s): a
    candidate that wraps them (found through gc or sys.modules) to rewrite replies is caught by identity,
    like a patched torch function."""
    names = {f"Worker.{n}": getattr(Worker, n) for n in ("load", "run", "time_trial", "reference_outputs",
                                                         "_forward", "_inputs_for", "_sync", "_ship", "violations")}
    module = sys.modules[__name__]
    names.update({f"worker.{n}": getattr(module, n) for n in _PROBES + ("_device_sync", "_no_sync", "probe_ms")})
    names.update(harness_code())
    return names


class Worker(ReferenceRole):
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

    # --- integrity -------------------------------------------------------------------------------
    def _snapshot(self) -> None:
        self.guards = {k: get() for k, get in _GUARDED.items()}
        self.own = _own_code()
        self.flags = global_flags()
        self.precision = precision_flags()
        self.threads = {t.ident for t in threading.enumerate()}

    def violations(self) -> dict[str, list[str]]:
        patched = [k for k, get in _GUARDED.items() if get() is not self.guards.get(k)]
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
            _device_sync()  # device-wide: work a candidate left on side streams counts

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
        """Timed calls, each on inputs generated on the device for it alone, from its own seed or (the
        harness's kernels, device_draws.py) from the batch's seed and the call's number: a cache keyed
        on addresses or contents never hits. Each call: inputs, L2 flush, device sync, timed
        forward, device sync. What the harness adds per call is queued on the device without a host
        round trip (fingerprints land in device memory), so the host is free to launch the next call's
        inputs while the device works.

        A call's time is the host's clock between the two device-wide syncs: the device is idle when the
        forward starts being launched and has finished everything, side streams included, when the clock
        stops, so that interval is the call as a user sees it (CUDA events recorded around it would add
        their own record latency to every call)."""
        cuda = self.device.type == "cuda"
        # The harness kernels' draws where the parent says both programs have them, torch's otherwise
        counted = self.counted if msg.get("device_draws") else None
        graph = self.graphed if isinstance(self.graphed, CountedInputs) == (counted is not None) else None
        eager = counted.inputs if counted is not None else self._inputs_for
        if counted is not None:
            counted.start(msg["seeds"][0] if msg["seeds"] else 0)  # the batch's key; calls advance its counter
        for seed in msg["warmup_seeds"]:
            self._forward(graph.draw(seed) if graph is not None else eager(seed))
        assert self.l2 is not None and self.model is not None
        # the reference's worker: the candidate's stopped process left no work on the device (idle_device.py)
        settled = self.idle_device(_device_sync).settle() if cuda and msg.get("idle_device") else {}
        self.l2.heat()
        self._sync()
        spot = set(msg.get("spot", []))
        seeds = msg["seeds"]
        sync = _device_sync if cuda else _no_sync
        model, clock = self.model, time.perf_counter
        host_ms: list[float] = []
        spots: dict[str, Any] = {}
        prints = Fingerprints(self.device, msg.get("print_key", 0), calls=len(seeds),
                              kernels=counted.kernels if counted is not None else None)

        counted_graph = graph if counted is not None else None  # graph is then the kernels' (CountedInputs)

        def draw(seed: int, pending: tuple[int, int, int] | None = None) -> list[Any]:
            """A call's inputs and the L2 flush, queued on the device (behind the previous call's staging
            copy, which the counted graph makes as its first node)."""
            if counted_graph is not None:
                l2 = self.l2
                assert l2 is not None
                if l2.touched:
                    l2.reset_persisting()  # persisting lines set aside before: reset them before the flush
                made = counted_graph.draw(seed, pending)
                l2.after_replay()
                return made
            if graph is not None:
                self.l2.reset_persisting()  # type: ignore[union-attr]
                return graph.draw(seed)  # the draws, then the L2 flush: one launch
            fresh = eager(seed)
            self.l2()  # type: ignore[misc]
            return fresh

        # Each call with the harness's work around it (timing.calls_per_trial); not the last, which draws no
        # next inputs: on a CPU its 0.05-0.8 ms set calls per trial for 1.4-3.6 ms calls (docs/evaluator.md)
        call_ms: list[float] = []
        pace_before = probe_ms()  # the host CPU's pace around the batch (pace.py), outside the timed calls
        with torch.no_grad():  # entered once: per call it would be harness time inside the timed region
            upcoming = draw(seeds[0]) if seeds else []
            call_t0 = clock()
            for i, seed in enumerate(seeds):
                inputs, upcoming = upcoming, []
                sync()  # device idle: no harness work or earlier call overlaps the timed region
                t0 = clock()
                out = model(*inputs)
                sync()  # device-wide: work a candidate left on side streams counts
                t1 = clock()
                host_ms.append((t1 - t0) * 1e3)
                _, outputs = flatten(out)
                # Every call, before anything touches the output: a plain tensor, or a lazy object whose
                # work would run inside the fingerprint, after the clock stopped.
                fake = [type(o).__name__ for o in outputs if isinstance(o, torch.Tensor) and type(o) is not torch.Tensor]
                if fake:
                    return {"ok": True, "ms": host_ms,
                            "problems": [f"timed call {i + 1} returned a {fake[0]}, not a plain torch.Tensor"]}
                # the outputs' copies, queued before the next call's inputs and flush (or made by its graph)
                staged, pending = prints.queue(outputs, defer=counted_graph is not None and i + 1 < len(seeds), seed=seed)
                if i in spot:
                    problems = inspect_outputs(outputs, inputs, self.device)
                    if problems:
                        return {"ok": True, "ms": host_ms, "problems": problems}
                    spots[str(i)] = [o.detach().clone() if isinstance(o, torch.Tensor) else o for o in outputs]
                del inputs
                if i + 1 < len(seeds):
                    # The next call's inputs and flush are queued now, and the host's bookkeeping below
                    # runs while the device flushes L2 instead of before it.
                    upcoming = draw(seeds[i + 1], pending)
                del out, outputs  # after the replay that copies them, where it does
                prints.record(staged, seed)
                if i + 1 < len(seeds):
                    now = clock()
                    call_ms.append((now - call_t0) * 1e3)
                    call_t0 = now
        pace = [pace_before, probe_ms()]
        if graph is not None and not graph.intact():
            self.graphed = None  # the graph writes where the inputs no longer are: eager from here on
            return {"ok": True, "ms": host_ms, "problems": [
                "an input's storage was replaced or resized during the timed calls (later calls would "
                "have seen stale inputs)"]}
        shipped = self._ship(spots, msg.get("spot_path")) if spots else {}
        return {"ok": True, "ms": host_ms, "fingerprints": prints.values(), "problems": [],
                "call_ms": call_ms, "pace_ms": pace} | settled | shipped
