"""Checks and measurements the worker runs on its own program: global-state snapshots, the L2 flush,
output fingerprints (:mod:`cudal1.evaluator.fingerprints`, re-exported here) and object inspection.
Split from :mod:`cudal1.evaluator.worker`, whose identity checks cover these functions too (a candidate
that replaced one is caught like a patched torch function).

torch and the standard library only: the GPU evaluation worker imports it.
"""

from __future__ import annotations

import threading
from typing import Any

import torch

from cudal1.evaluator.extensions import mentions_compile
from cudal1.evaluator.fingerprints import ACCUMULATION, SHIFT, Fingerprints, fingerprint  # noqa: F401 - re-exported


def global_flags() -> dict[str, Any]:
    """Global state that changes what is measured. cudnn.benchmark is left out on purpose: it is a
    legitimate per-process choice that cannot reach the reference, which runs in another process."""
    state: dict[str, Any] = {
        "torch.get_num_threads": torch.get_num_threads(),
        "torch.get_num_interop_threads": torch.get_num_interop_threads(),
        "torch.get_default_dtype": str(torch.get_default_dtype()),
        "torch.are_deterministic_algorithms_enabled": torch.are_deterministic_algorithms_enabled(),
        "python_threads": threading.active_count(),
        # set_flush_denormal has no getter: probe it (a denormal survives x * 1 unless flushing is on)
        "flush_denormal": bool((torch.tensor([1e-40], dtype=torch.float32) * 1.0).item() == 0.0),
    }
    return state


def compile_without_threads() -> None:
    """Make torch.compile compile in the calling thread and start no tqdm monitor: a timed worker whose
    graph was not cached by the builds then starts no thread of its own that the worker's thread count
    would blame on the candidate. ``compile_threads`` is outside Inductor's cache key: the cached graphs
    are the same ones."""
    import torch._inductor.config as inductor_config

    inductor_config.compile_threads = 1
    try:
        import tqdm

        tqdm.tqdm.monitor_interval = 0  # tqdm's documented switch for its monitor thread
    except ImportError:
        pass


def warm_compile(device: torch.device) -> None:
    """torch.compile's own start: Inductor's imports and a compile of a stand-in function (seconds; a batch
    makes them when the worker starts, process.WorkerSpec.warm_compile), before the worker's snapshot and
    any program code. torch.compile starts helper threads when it first compiles something (a tqdm
    monitor, a thread pool or a subprocess pool's reader); a graph the builds did not leave cached
    compiles after the snapshot, and its threads read as the candidate's (L3-35/37's torch.compile
    baselines, "python_threads: 1 -> 2", on H100 and H200). So compile in this thread, without the monitor
    (compile_threads is outside Inductor's cache key: same cached graphs)."""
    compile_without_threads()
    torch.compile(lambda x: x + 1)(torch.ones(1, device=device))


_MATMUL_PRECISION = {"highest": 2, "high": 1, "medium": 0}


def lowered_precision(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """The switches of :func:`precision_flags` that moved towards less float32 precision: TF32 or reduced
    precision reductions turned on, the float32 matmul precision lowered. On a CPU with bfloat16 units
    "medium" runs float32 matmuls in bfloat16: a 512x512x512 matmul of ``torch.rand`` inputs came out
    2.3x faster and within 1e-4 of the reference (an AMD EPYC with avx512_bf16).

    >>> lowered_precision({"matmul.allow_tf32": False, "float32_matmul_precision": "highest"},
    ...                   {"matmul.allow_tf32": False, "float32_matmul_precision": "medium"})
    ['float32_matmul_precision: highest -> medium']
    >>> lowered_precision({"cudnn.allow_tf32": True}, {"cudnn.allow_tf32": False})
    []
    """
    lowered = []
    for key, was in before.items():
        now = after.get(key, was)
        if key == "float32_matmul_precision":
            down = _MATMUL_PRECISION.get(str(now), 2) < _MATMUL_PRECISION.get(str(was), 2)
        else:
            down = bool(now) and not bool(was)
        if down:
            lowered.append(f"{key}: {was} -> {now}")
    return lowered


def precision_flags() -> dict[str, Any]:
    return {
        "matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "matmul.allow_fp16_reduced_precision_reduction": torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
        "matmul.allow_bf16_reduced_precision_reduction": torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
    }


class L2Flush:
    """Flush L2 before every timed call and drop persisting-L2 lines, so neither a warm cache nor an
    access-policy window set by the candidate survives from one call into the next."""

    def __init__(self, device: torch.device, enabled: bool) -> None:
        self.enabled = enabled and device.type == "cuda"
        self.buf: torch.Tensor | None = None
        self.driver = None
        self.touched = False
        if not self.enabled:
            return
        l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 50 * 2**20) or 50 * 2**20
        self.buf = torch.empty(int(2 * l2) // 4 + 1, dtype=torch.float32, device=device)
        import ctypes

        try:
            self.driver = ctypes.CDLL("libcuda.so.1")
        except OSError:
            self.driver = None
        # The query's argument, made once: the query runs before every timed call.
        self._size = ctypes.c_size_t(1)
        self._size_ref = ctypes.byref(self._size)

    def __call__(self) -> None:
        if not self.enabled:
            return
        self.reset_persisting()
        assert self.buf is not None
        self.buf.zero_()

    def reset_persisting(self) -> None:
        """The driver's half of the flush (the zeroing may be part of a captured graph, this cannot)."""
        if self.enabled and self.driver is not None and self._persisting():
            # CU_LIMIT_PERSISTING_L2_CACHE_SIZE = 0x06; then evict every persisting line. Once a program
            # has set aside persisting L2, this runs before every call from then on.
            self.touched = True
            self.driver.cuCtxSetLimit(0x06, 0)
            self.driver.cuCtxResetPersistingL2Cache()

    def after_replay(self) -> None:
        """After a replay that flushed L2 without resetting persisting lines first (none had been set aside
        in this process): if the last call set some aside, reset them and flush again, so this call too
        starts without them. From then on the reset runs before every replay (``touched``). The query
        runs while the device works through the replay, not before it."""
        if self.enabled and not self.touched and self.driver is not None and self._persisting():
            self()

    def _persisting(self) -> bool:
        """Whether persisting L2 was ever set aside in this process (a host-side query, no device work:
        with no set-aside no line can persist, and the reset costs ~30 us a call)."""
        if self.touched:
            return True
        self._size.value = 1
        if self.driver.cuCtxGetLimit(self._size_ref, 0x06) != 0:  # type: ignore[union-attr]
            return True  # the query failed: reset, as before
        return self._size.value != 0

    def heat(self, passes: int = 24) -> None:
        """Keep the device busy a few milliseconds before a timed batch: after the idle gap between two
        commands its clocks need that long to return to where the other program was timed."""
        if self.enabled:
            assert self.buf is not None
            for _ in range(passes):
                self.buf.zero_()


def warm_kernels(device: torch.device) -> None:
    """Launch the harness's own device work once (fingerprint batches of each float dtype, the flush's
    zeroing), before any program code: CUDA loads a kernel's module on its first launch, and a fresh
    worker paid that inside its first timed command, 77 ms against 2.3 ms once launched at its start
    (median of nine fresh workers on an H100)."""
    if device.type != "cuda":
        return
    x = torch.ones(4, 6, device=device)
    for dtype in (torch.float32, torch.float16, torch.float64):
        prints = Fingerprints(device, key=1, calls=2)
        prints.add([x.to(dtype)], 1)
        prints.add([x.to(dtype).t()], 2)  # another layout: its own staging and sums
        prints.values()
    x.zero_()
    torch.cuda.synchronize(device)


def to_device(obj: Any, device: torch.device) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj if obj.device == device else obj.to(device)
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_device(o, device) for o in obj)
    return obj


def flatten(out: Any) -> tuple[str, list[Any]]:
    if isinstance(out, (tuple, list)):
        return "sequence", list(out)
    return "single", [out]


def storage_span(t: torch.Tensor) -> tuple[int, int] | None:
    if t.device.type == "meta" or t.numel() == 0:
        return None
    start = t.untyped_storage().data_ptr()
    return (start, start + t.untyped_storage().nbytes())


def inspect_outputs(outputs: list[Any], inputs: list[Any], device: torch.device) -> list[str]:
    """Problems with the objects themselves (not their values, which the parent compares)."""
    problems = []
    in_spans = [s for x in inputs if isinstance(x, torch.Tensor) and (s := storage_span(x))]
    for i, o in enumerate(outputs):
        if not isinstance(o, torch.Tensor):
            if isinstance(o, (int, float, bool)):
                continue
            problems.append(f"output {i} is a {type(o).__name__}, not a tensor")
            continue
        if type(o) is not torch.Tensor and type(o) is not torch.nn.Parameter:
            problems.append(f"output {i} is a {type(o).__name__}, not a plain torch.Tensor")
            continue
        if o.device != device and not (o.device.type == device.type and device.index is None):
            problems.append(f"output {i} is on {o.device}, expected {device}")
        if o.numel() > 0 and (o.untyped_storage().nbytes() == 0 or o.data_ptr() == 0):
            problems.append(f"output {i} has no storage (lazy or fake tensor)")
        span = storage_span(o)
        if span and any(span[0] < e and s < span[1] for s, e in in_spans):
            problems.append(f"output {i} shares memory with an input (returns or aliases an input)")
    return problems


def uses_compile(path: str) -> bool:
    with open(path, encoding="utf-8") as handle:
        return mentions_compile(handle.read())


def same_layout(a: list[Any], b: list[Any]) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if isinstance(x, torch.Tensor) != isinstance(y, torch.Tensor):
            return False
        if isinstance(x, torch.Tensor) and (x.shape != y.shape or x.dtype != y.dtype or x.device != y.device):
            return False
    return True
