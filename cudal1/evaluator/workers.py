"""The parent's workers: where they live, how they are specified, a candidate's prepared worker, and what
reaches the parent from them (a reference's worker is references.py's).

A sandboxed worker's device memory reaches the parent as a file descriptor when the driver allows (probed
once per device), else as files.
"""

from __future__ import annotations

import functools
import os
import secrets
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

import torch

from cudal1.candidates import Candidate
from cudal1.evaluator import device_draws
from cudal1.evaluator.config import EvalConfig
from cudal1.evaluator.extensions import mentions_compile
from cudal1.evaluator.process import WorkerFailure, WorkerProcess, WorkerSpec
from cudal1.evaluator.transport import TransportError, receive
from cudal1.problems import Problem


def default_extensions_root() -> Path:
    """Extension builds, one folder per candidate hash, kept across runs. Under the temp dir, not the
    home folder, because a sandboxed worker cannot traverse root's home."""
    root = Path(tempfile.gettempdir()) / "cudal1-extensions"
    root.mkdir(exist_ok=True)
    root.chmod(0o711)
    return root / torch.__version__


def extensions_folder(extensions_root: Path, candidate: Candidate) -> Path:
    """A candidate's own folder of builds under ``extensions_root``, named by its source hash: its workers
    (timed, prebuild, re-check) share it, and a program can only poison its own entries."""
    return extensions_root / candidate.sha256[:16]


def _draws_root(config: EvalConfig) -> Path | None:
    """Where the draw kernels are compiled: beside the extension builds, on CUDA."""
    return default_extensions_root().parent if config.is_cuda else None


def draws_path(config: EvalConfig) -> str | None:
    """The harness's compiled draw kernels for a worker's load, compiled on first use; None off CUDA, or
    where they cannot be compiled (no nvcc: torch's generators draw then)."""
    root = _draws_root(config)
    path = device_draws.fatbin(root) if root is not None else None
    return str(path) if path is not None else None


def prefetch_draws(config: EvalConfig) -> None:
    """Start compiling the draw kernels beside a worker's start (device_draws.prefetch)."""
    root = _draws_root(config)
    if root is not None:
        device_draws.prefetch(root)


def new_seed() -> int:
    return secrets.randbits(31)


def scratch_root() -> str | None:
    """Worker directories live in /dev/shm when it has room: on CPU tensors cross between processes as
    files, and on a disk-backed /tmp a 256 MB output costs seconds per trial."""
    shm = Path("/dev/shm")
    try:
        if shm.is_dir() and os.access(shm, os.W_OK) and shutil.disk_usage(shm).free > 8 * 2**30:
            return str(shm)
    except OSError:
        pass
    return None


def compare_device(config: EvalConfig) -> str:
    """Where the parent compares outputs: on the evaluation GPU when there is one (float64 on a few
    hundred MB takes seconds on a CPU core), else the CPU."""
    if config.is_cuda and torch.cuda.is_available():
        return config.device
    return "cpu"


_PROBE_LOCK = threading.Lock()


def fd_transport_works(device: str) -> bool:
    """Whether a sandboxed worker's device memory reaches this process as a file descriptor: probed once
    per machine set-up (driver, torch, GPU model, uid), and the answer kept in a file only this user can
    write, so a fresh ``cudal1 evaluate-one`` does not start a probe worker each time. When it does not
    (no POSIX-descriptor support in the driver), workers send tensors as files: slower, same checks.

    Under a lock: a batch starts its first workers from several threads, and two first probes on a fresh
    machine wrote the same temporary file; the second rename failed and stopped the batch (on an H100,
    2026-11-27, once the first workers no longer waited for fork servers of their own)."""
    with _PROBE_LOCK:
        return _fd_transport_works(device)


@functools.cache
def _fd_transport_works(device: str) -> bool:
    if not device.startswith("cuda") or not torch.cuda.is_available():
        return False
    cache = _probe_cache(device)
    if cache is not None and cache.is_file() and cache.stat().st_uid == os.getuid():
        return cache.read_text().strip() == "1"
    works = _probe_fd_transport(device)
    if cache is not None:
        tmp = cache.with_suffix(f".{os.getpid()}.{threading.get_ident()}")
        tmp.write_text("1" if works else "0")
        os.replace(tmp, cache)
    return works


def _probe_cache(device: str) -> Path | None:
    """Where the probe's answer for this set-up is kept; None when the set-up cannot be named."""
    import ctypes
    import hashlib

    from cudal1.evaluator.sandbox import sandbox_available

    try:
        version = ctypes.c_int()
        ctypes.CDLL("libcuda.so.1").cuDriverGetVersion(ctypes.byref(version))
        key = "|".join([torch.__version__, str(torch.version.cuda), str(version.value),
                        torch.cuda.get_device_name(device), str(os.getuid()), str(sandbox_available())])
        root = Path(tempfile.gettempdir()) / f"cudal1-probe-{os.getuid()}"
        root.mkdir(mode=0o755, exist_ok=True)
        if root.stat().st_uid != os.getuid():
            return None
        return root / (hashlib.sha256(key.encode()).hexdigest()[:16] + ".txt")
    except (OSError, AttributeError, RuntimeError):
        return None


def _probe_fd_transport(device: str) -> bool:
    root = Path(tempfile.mkdtemp(prefix="cudal1-probe-", dir=scratch_root()))
    root.chmod(0o711)
    try:
        with WorkerProcess(WorkerSpec(device, flush_l2=False), root / "probe", "probe") as worker:
            worker.wait_ready(120.0)
            reply = worker.call({"cmd": "probe", "out_path": str(worker.workdir / "probe.pt")}, 60.0)
            if "block" not in reply:
                return False
            got = receive(reply, worker.workdir / "probe.pt", device, worker.fd_sock)
            return bool(torch.equal(got["probe"], torch.arange(1000, dtype=torch.float32, device=device)))
    except (WorkerFailure, TransportError, RuntimeError, OSError):
        return False
    finally:
        shutil.rmtree(root, ignore_errors=True)


def cpu_core_for(problem: Problem, config: EvalConfig) -> int | None:
    """The core a problem's timed workers share on a CPU device (single-threaded programs only): measured
    on the 2-core machine, the reference evaluated against itself under three busy loops came out
    0.57x [0.52, 0.61] with the two workers left to the scheduler (docs/evaluator.md at 88f971b). Spread over the
    cores this process may use by the problem's hash and this process's id, so that problems, and two
    evaluators of one problem (parallel test workers), do not all land on one core."""
    if config.is_cuda or config.cpu_threads != 1 or not hasattr(os, "sched_getaffinity"):
        return None
    allowed = sorted(os.sched_getaffinity(0))
    return allowed[(int(problem.sha256[:8], 16) + os.getpid()) % len(allowed)] if len(allowed) > 1 else None


def worker_spec(config: EvalConfig, problem: Problem | None = None, **extra: Any) -> WorkerSpec:
    """The spec every timed worker of this config gets (with ``problem``: pinned to its core on a CPU)."""
    core = cpu_core_for(problem, config) if problem is not None else None
    return WorkerSpec(config.device, config.cpu_threads, config.memory_limit_mb, config.flush_l2,
                      fd_transport=fd_transport_works(config.device), core=core, **extra)


def release_cache(config: EvalConfig) -> None:
    """Give the parent's freed device memory back to the driver: the caching allocator would otherwise
    keep the last problem's records reserved, out of reach of the next workers."""
    if config.is_cuda and torch.cuda.is_available():
        with torch.cuda.device(config.device):
            torch.cuda.empty_cache()


def receive_payload(reply: dict[str, Any], path: Path, config: EvalConfig, worker: WorkerProcess) -> Any:
    """What a worker's reply carried (device memory or a file), on the compare device; None if nothing."""
    if "payload" not in reply and not reply.get("payload_file"):
        path.unlink(missing_ok=True)
        return None
    return receive(reply, path, compare_device(config), worker.fd_sock)


def module_file(worker: WorkerProcess) -> str | None:
    """Where a candidate's module says it lives: its build-cache directory (see worker.load_program)."""
    ext = worker.spec.extensions_dir
    return str(ext / "candidate.py") if ext is not None else None


def prepare_candidate_worker(problem: Problem, candidate: Candidate, config: EvalConfig,
                             extensions_root: Path | None = None, *, warm_compile: bool = False) -> WorkerProcess:
    """Start a candidate's worker ahead of time: interpreter, torch and the CUDA context come up while
    another candidate is being timed. Nothing of the candidate runs until its ``load`` command.
    ``warm_compile``: torch.compile's own start too (WorkerSpec.warm_compile), for a program that calls it."""
    root = Path(tempfile.mkdtemp(prefix="cudal1-cand-", dir=scratch_root()))
    root.chmod(0o711)
    work = root / "candidate"
    work.mkdir(mode=0o700)
    (work / "candidate.py").write_text(candidate.source)
    (work / "reference.py").write_text(problem.source)
    ext_root = extensions_root or default_extensions_root()
    return WorkerProcess(worker_spec(config, problem, extensions_dir=extensions_folder(ext_root, candidate),
                                     warm_compile=warm_compile, compiles=mentions_compile(candidate.source)),
                         work, "candidate")


def device_name(device: str) -> str:
    """A name that says which hardware measured: 'cpu' or the CUDA device's product name."""
    if device.startswith("cuda") and torch.cuda.is_available():
        index = int(device.split(":")[1]) if ":" in device else 0
        return torch.cuda.get_device_name(index)
    return "cpu"
