"""Timed calls' random inputs drawn by kernels of the harness's own (``draws.cu``), from a counter on the
device: a captured graph of them needs no host work per call but its launch.

Why: a graph that draws through torch's generators makes torch refill the generator's seed and offset
on the device before every replay, two small launches (each 5-25 us of the host's time on an H100 host),
beside a kernel of a few microseconds. Here the inputs of a batch's call ``i`` are Philox draws keyed by the batch's seed, with
``i`` in the counter. The graph's first node advances the call counter itself and makes the previous
call's staging copy (from a slot of pinned memory the host writes): per call the host launches the graph
and nothing else.

The draws follow the distributions of the reference's ``get_inputs`` (``randn``: standard normal;
``rand``: uniform on [0, 1); ``randint``: uniform on [low, high)), with its shapes and dtypes; they are
not torch's bits. Correctness trials keep ``get_inputs``'s own draws. Before a worker uses them,
:func:`check` compares each draw with the reference's ``get_inputs`` draw of the same factory (shape,
dtype, range, mean and spread within sampling error). Both programs of a row are timed on the same
draws, or both on torch's.

The parent compiles ``draws.cu`` once per machine with nvcc (:func:`fatbin`); a worker loads it through
the driver API (:class:`DeviceDraws`). Imports torch and the standard library only: the GPU evaluation
worker uses it.
"""

from __future__ import annotations

import ctypes
import hashlib
import math
import os
import shutil
import subprocess
import tempfile
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

SOURCE = Path(__file__).with_name("draws.cu")
# A100, RTX 3090, L40, H100/H20 as machine code; later devices JIT-compile the PTX of the last
ARCHS = ("80", "86", "89", "90")
_KINDS = {torch.randn: 0, torch.rand: 1, torch.randint: 2}
_DTYPES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2, torch.float64: 3, torch.int64: 4,
           torch.int32: 5, torch.int16: 6, torch.int8: 7, torch.uint8: 8}
_FLOATS = {torch.float32, torch.float16, torch.bfloat16, torch.float64}
THREADS = 256
SUMS_BLOCKS_PER_SM = 16
_built: dict[Path, Future[Path | None]] = {}
_lock = threading.Lock()
_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cudal1-draws")


def follow_offset(default: torch.Generator | None, seed: int, offset: int) -> None:
    """As :func:`cudal1.evaluator.inputs.follow_state`, for draws that did not come from a torch generator: the default generator
    left at ``seed`` and the offset ``get_inputs()``'s draws reach (recorded once at load)."""
    if default is None:
        return
    default.manual_seed(seed)
    default.set_offset(offset)


def nvcc() -> str | None:
    found = shutil.which("nvcc")
    if found:
        return found
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    candidate = Path(home) / "bin" / "nvcc"
    return str(candidate) if candidate.exists() else None


def local_archs() -> tuple[str, ...]:
    """The compute capabilities of this machine's GPUs, from nvidia-smi (no CUDA context in the parent);
    ARCHS where it cannot tell.

    >>> isinstance(local_archs(), tuple)
    True
    """
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return ARCHS
    try:
        out = subprocess.run([smi, "--query-gpu=compute_cap", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ARCHS
    found = sorted({line.strip().replace(".", "") for line in out.splitlines() if line.strip()})
    return tuple(found) if found and all(a.isdigit() for a in found) else ARCHS


def flags(archs: tuple[str, ...] = ARCHS) -> list[str]:
    """nvcc's flags: machine code for each of ``archs``, and the PTX of the last for later devices.

    >>> flags(("90",))
    ['--fatbin', '-O3', '-gencode=arch=compute_90,code=sm_90', '-gencode=arch=compute_90,code=compute_90']
    """
    arch = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in archs]
    return ["--fatbin", "-O3", *arch, f"-gencode=arch=compute_{archs[-1]},code=compute_{archs[-1]}"]


def prefetch(root: Path) -> None:
    """Start compiling in the background, so a worker's start hides it: on a fresh H100 host the first
    ``evaluate-one`` waited about 4 s for the five targets of ARCHS;
    only this machine's are compiled now."""
    with _lock:
        if root not in _built:
            _built[root] = _pool.submit(_compile, root)


def fatbin(root: Path) -> Path | None:
    """The compiled kernels under ``root/.draws``, compiled on first use (about 1 s for one target; named
    by the source, the flags and nvcc's version, so a change compiles again); None where nvcc is missing
    or fails, and the batch then draws through torch. Only the parent writes there; workers read it."""
    prefetch(root)
    return _built[root].result()


def _compile(root: Path) -> Path | None:
    compiler = nvcc()
    if compiler is None:
        return None
    try:
        version = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=60).stdout
        archs = local_archs()
        key = hashlib.sha256("\n".join([SOURCE.read_text(), version, *flags(archs)]).encode()).hexdigest()[:16]
        folder = root / ".draws"
        path = folder / f"draws-{key}.fatbin"
        if path.exists():
            return path
        folder.mkdir(parents=True, exist_ok=True)
        folder.chmod(0o755)
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
        os.close(fd)
        done = subprocess.run([compiler, *flags(archs), "-o", tmp, str(SOURCE)], capture_output=True, text=True,
                              timeout=300)
        if done.returncode != 0:
            os.unlink(tmp)
            return None
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)  # whole or absent: a concurrent reader never sees half a file
        return path
    except (OSError, subprocess.SubprocessError):
        return None


@dataclass(frozen=True)
class Draw:
    """One factory draw of a plan as the kernels make it: kind None for the non-random factories (zeros,
    ones, full), which torch makes inside the same graph."""

    kind: int | None
    shape: tuple[int, ...]
    dtype: torch.dtype
    low: int = 0
    high: int = 0


def describe(plan: Any, made: list[torch.Tensor]) -> list[Draw] | None:
    """Each of ``plan``'s draws (``made``: one eager draw of it, for shapes and dtypes) as the kernels make
    it, or None where one is outside what they draw (another dtype, bool, a draw off the device)."""
    out = []
    for (func, args, _), t in zip(plan.draws, made):
        kind = _KINDS.get(func)
        if kind is None:
            out.append(Draw(None, tuple(t.shape), t.dtype))
            continue
        if t.dtype not in _DTYPES or (kind != 2 and t.dtype not in _FLOATS) or t.device.type != "cuda":
            return None
        low = high = 0
        if kind == 2:
            bounds = [a for a in args if isinstance(a, int) and not isinstance(a, bool)]
            low, high = (0, bounds[0]) if len(bounds) == 1 else (bounds[0], bounds[1])
            if high <= low or len(bounds) not in (1, 2):
                return None
        out.append(Draw(kind, tuple(t.shape), t.dtype, low, high))
    return out


def _check_driver(code: int, what: str) -> None:
    if code != 0:
        raise RuntimeError(f"{what} failed with CUDA driver error {code}")


class DeviceDraws:
    """The compiled kernels in this process's context, and the key they draw from ([seed, call])."""

    sum_dtypes = frozenset(_FLOATS)  # what cudal1_sums reads as it is (fingerprints sum these in place)

    def __init__(self, path: str, device: torch.device) -> None:
        self.device = device
        self.driver = ctypes.CDLL("libcuda.so.1")
        self.driver.cuLaunchKernel.argtypes = [ctypes.c_void_p, *([ctypes.c_uint] * 7), ctypes.c_void_p,
                                               ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_void_p)]
        torch.zeros(1, device=device)  # the context current in this thread
        module = ctypes.c_void_p()
        _check_driver(self.driver.cuModuleLoad(ctypes.byref(module), os.fsencode(path)), "cuModuleLoad")
        self.module = module
        self.draw_fn, self.begin_fn = ctypes.c_void_p(), ctypes.c_void_p()
        _check_driver(self.driver.cuModuleGetFunction(ctypes.byref(self.draw_fn), module, b"cudal1_draw"), "draw")
        _check_driver(self.driver.cuModuleGetFunction(ctypes.byref(self.begin_fn), module, b"cudal1_begin"), "begin")
        self.sums_fn = ctypes.c_void_p()
        _check_driver(self.driver.cuModuleGetFunction(ctypes.byref(self.sums_fn), module, b"cudal1_sums"), "sums")
        self.key = torch.zeros(2, dtype=torch.int64, device=device)
        self.sms = torch.cuda.get_device_properties(device).multi_processor_count
        self.blocks = 8 * self.sms
        # The staging copy's slot {source, destination, bytes}: pinned host memory the device reads, so
        # the host hands a copy to the next replay with three stores instead of a launch.
        host, dev = ctypes.c_void_p(), ctypes.c_uint64()
        _check_driver(self.driver.cuMemHostAlloc(ctypes.byref(host), ctypes.c_size_t(24), ctypes.c_uint(0x02)),
                      "cuMemHostAlloc")  # CU_MEMHOSTALLOC_DEVICEMAP
        _check_driver(self.driver.cuMemHostGetDevicePointer_v2(ctypes.byref(dev), host, ctypes.c_uint(0)),
                      "cuMemHostGetDevicePointer")
        self.slot = (ctypes.c_uint64 * 3).from_address(host.value or 0)
        self.slot_device = dev.value
        self.hand(None)

    def start(self, seed: int) -> None:
        """A batch's key: its seed, and the call counter at 0 (one small copy, before the batch's calls; the
        first call's :meth:`begin` makes it 1)."""
        self.key.copy_(torch.tensor([seed & 0x7FFF_FFFF_FFFF_FFFF, 0], dtype=torch.int64))

    def _launch(self, fn: ctypes.c_void_p, grid: int, args: list[Any], rows: int = 1) -> None:
        params = (ctypes.c_void_p * len(args))(*[ctypes.cast(ctypes.pointer(a), ctypes.c_void_p) for a in args])
        stream = torch.cuda.current_stream(self.device).cuda_stream
        _check_driver(self.driver.cuLaunchKernel(fn, grid, rows, 1, THREADS, 1, 1, 0, ctypes.c_void_p(stream),
                                                 params, None), "cuLaunchKernel")

    def sums(self, x: torch.Tensor, p: torch.Tensor, a: torch.Tensor, offsets: torch.Tensor, stride: int,
             size: int) -> torch.Tensor:
        """Fingerprint sums of the staged rows ``x`` ([calls, numel], a float dtype): [calls, 4] float64 of
        sum x, sum |x|, sum x*w and the 2-norm, w = P[e] * A[offset + (e // stride) % size]
        (fingerprints.Fingerprints._weights), in one pass accumulated in float64."""
        m, n = x.shape
        # 16 blocks per SM over all rows: 0.252 ms on 64M float32 values against 0.340 ms at 4 per SM, the
        # same sums within 1.3e-15 relative
        chunks = max(1, min((n + THREADS - 1) // THREADS, (SUMS_BLOCKS_PER_SM * self.sms + m - 1) // m))
        partials = torch.empty((m, chunks, 4), dtype=torch.float64, device=self.device)
        self._launch(self.sums_fn, chunks, [ctypes.c_void_p(x.data_ptr()), ctypes.c_int(_DTYPES[x.dtype]),
                                            ctypes.c_longlong(n), ctypes.c_void_p(p.data_ptr()),
                                            ctypes.c_void_p(a.data_ptr()), ctypes.c_void_p(offsets.data_ptr()),
                                            ctypes.c_longlong(stride), ctypes.c_longlong(size),
                                            ctypes.c_void_p(partials.data_ptr())], rows=m)
        out = partials.sum(1)
        out[:, 3].sqrt_()  # the 2-norm, as the torch path's table holds it
        return out

    def warm(self) -> None:
        """Launch the sums once at load: CUDA loads a kernel on its first launch, which would otherwise
        fall in the first timed batch (probes.warm_kernels says what that cost)."""
        ones = torch.ones(4, dtype=torch.int8, device=self.device)
        self.sums(torch.ones((1, 4), device=self.device), ones, ones, torch.zeros(1, dtype=torch.int64, device=self.device),
                  1, 1)

    def fill(self, out: torch.Tensor, draw: Draw, index: int) -> None:
        """Write draw ``index`` of the current call into ``out`` (contiguous, ``draw``'s shape and dtype)."""
        n = out.numel()
        if n == 0:
            return
        per = 2 if draw.kind == 2 or draw.dtype == torch.float64 else 4  # values per Philox block (draws.cu)
        grid = max(1, min(self.blocks, ((n + per - 1) // per + THREADS - 1) // THREADS))
        self._launch(self.draw_fn, grid, [ctypes.c_void_p(out.data_ptr()), ctypes.c_longlong(n),
                                          ctypes.c_int(draw.kind or 0), ctypes.c_int(_DTYPES[draw.dtype]),
                                          ctypes.c_longlong(draw.low), ctypes.c_longlong(draw.high),
                                          ctypes.c_void_p(self.key.data_ptr()), ctypes.c_int(index)])

    def hand(self, pending: tuple[int, int, int] | None) -> None:
        """What the next replay's first node copies: (source, destination, bytes), or nothing."""
        self.slot[0], self.slot[1], self.slot[2] = pending or (0, 0, 0)

    def begin(self) -> None:
        """A call's first launch (a graph's first node): the counter advanced, and the copy the slot names."""
        self._launch(self.begin_fn, 2 * self.sms, [ctypes.c_uint64(self.slot_device), ctypes.c_void_p(self.key.data_ptr())])

    def make(self, plan: Any, draws: list[Draw]) -> list[torch.Tensor]:
        """One call: :meth:`begin`, then its draws in plan order. The non-random factories are torch's.
        Made directly (not replayed) there is no copy to hand over: the slot is emptied first, so what an
        earlier replay copied (memory freed since) is never copied again."""
        self.hand(None)
        self.begin()
        made = []
        for i, ((func, args, kwargs), d) in enumerate(zip(plan.draws, draws)):
            if d.kind is None:
                made.append(func(*args, **kwargs))
            else:
                t = torch.empty(d.shape, dtype=d.dtype, device=self.device)
                self.fill(t, d, i)
                made.append(t)
        return made


def check(draws: list[Draw], ours: list[torch.Tensor], theirs: list[torch.Tensor]) -> str:
    """'' when every draw of ours has the shape, dtype and layout of ``get_inputs``'s (``theirs``), its
    values in the factory's range, and (with 64 values or more) mean and standard deviation within six
    standard errors of the factory's, and of theirs; else what differs. Non-random draws must be equal."""
    for i, (d, a, b) in enumerate(zip(draws, ours, theirs)):
        if (a.shape, a.dtype, a.stride()) != (b.shape, b.dtype, b.stride()):
            return f"draw {i}: {tuple(a.shape)} {a.dtype} against get_inputs' {tuple(b.shape)} {b.dtype}"
        if d.kind is None:
            if not torch.equal(a, b):
                return f"draw {i}: a constant factory differs"
            continue
        x, y = a.double(), b.double()
        lo, hi = (0.0, 1.0) if d.kind == 1 else (float(d.low), float(d.high - 1))
        if d.kind != 0 and (x.min().item() < lo or x.max().item() > hi or (d.kind == 1 and x.max().item() >= 1.0)):
            return f"draw {i}: values outside [{lo}, {hi}]"
        n = x.numel()
        if n < 64 or (d.kind == 2 and d.high - d.low < 2):
            continue
        if d.kind == 0:
            mean, std = 0.0, 1.0
        elif d.kind == 1:  # k / 2^bits, k < 2^bits: bf16's 8 bits put the mean at 0.498, for torch too
            step = 2.0 ** -{torch.float16: 11, torch.bfloat16: 8, torch.float64: 53}.get(d.dtype, 24)
            mean, std = (1 - step) / 2, math.sqrt((1 - step * step) / 12)
        else:
            span = d.high - d.low
            mean, std = d.low + (span - 1) / 2, math.sqrt((span * span - 1) / 12)
        mean_se, std_se = std / math.sqrt(n), std / math.sqrt(2 * n)
        for name, sample in (("ours", x), ("get_inputs'", y)):
            if abs(sample.mean().item() - mean) > 6 * mean_se + 1e-3 * std:
                return f"draw {i}: {name} mean {sample.mean().item():.4g}, expected {mean:.4g}"
            if abs(sample.std().item() - std) > 6 * std_se + 1e-2 * std:
                return f"draw {i}: {name} standard deviation {sample.std().item():.4g}, expected {std:.4g}"
    return ""


class Counted:
    """A plan's draws made by the kernels: one call's inputs eagerly (:meth:`inputs`), or captured with
    the L2 flush as one graph (``inputs.capture_counted``). The device's default generator is left where
    ``get_inputs()`` leaves it (the seed, and the offset its draws reach), as with torch's draws."""

    def __init__(self, kernels: DeviceDraws, plan: Any, draws: list[Draw], offset: int,
                 cpu_generator: torch.Generator, follow: torch.Generator | None) -> None:
        self.kernels, self.plan, self.draws, self.offset = kernels, plan, draws, offset
        self.cpu_generator, self.follow = cpu_generator, follow

    def start(self, seed: int) -> None:
        self.kernels.start(seed)

    def inputs(self, seed: int) -> list[Any]:
        """The next call's inputs of the batch (the counter advances), seeding the CPU and default
        generators as ``get_inputs()``'s draws would leave them for ``seed``."""
        self.cpu_generator.manual_seed(seed)
        made = self.kernels.make(self.plan, self.draws)
        follow_offset(self.follow, seed, self.offset)
        return self.plan.assemble(made)


def prepare(path: str, plan: Any, device: torch.device, cpu_generator: torch.Generator,
            device_generator: torch.Generator, follow: torch.Generator | None,
            seed: int = 24680) -> tuple[Counted | None, str]:
    """The kernels loaded and checked against ``get_inputs``'s own draws of ``plan`` (:func:`check`), and
    two calls' draws differing; (None, why) where any of it fails. Runs at load, before any program code."""
    theirs = plan.made(seed, cpu_generator, device_generator)
    offset = device_generator.get_offset()
    draws = describe(plan, theirs)
    if draws is None:
        return None, "a draw the kernels do not make"
    try:
        kernels = DeviceDraws(path, device)
        kernels.start(seed)
        ours = kernels.make(plan, draws)
        following = kernels.make(plan, draws)
        kernels.warm()
        torch.cuda.synchronize(device)
    except (OSError, RuntimeError) as exc:
        return None, f"kernels: {exc}"
    problem = check(draws, ours, theirs)
    if problem:
        return None, problem
    random = [i for i, d in enumerate(draws) if d.kind is not None and math.prod(d.shape) > 1]
    if any(torch.equal(ours[i], following[i]) for i in random):
        return None, "two calls drew the same values"
    return Counted(kernels, plan, draws, offset, cpu_generator, follow), ""
