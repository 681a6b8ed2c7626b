"""The parent's workers: where they live, how they are specified, the warm reference session of a
problem, a candidate's prepared worker, and what reaches the parent from them.

The reference runs in its own worker, which never executes candidate code; its outputs live only in the
parent. A sandboxed worker's device memory reaches the parent as a file descriptor when the driver allows
(probed once per device), else as files.
"""

from __future__ import annotations

import functools
import os
import secrets
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import torch

from cudal1.candidates import Candidate
from cudal1.evaluator import device_draws
from cudal1.evaluator.closing import CLOSER
from cudal1.evaluator.config import EvalConfig
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
    0.57x [0.52, 0.61] with the two workers left to the scheduler (docs/evaluator.md). Spread over the
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


class ReferenceSession:
    """A warm worker running one problem's reference. Safe to share between candidates of that problem:
    it never executes candidate code."""

    def __init__(self, problem: Problem, config: EvalConfig, root: Path | None = None, *, load: bool = True) -> None:
        """``load=False`` starts the process only (interpreter, torch, CUDA context) and defers building the
        reference model to the first use, so a session prestarted for the next problem puts no work on the
        GPU while the current candidate is timed."""
        self.problem = problem
        self.config = config
        self._own_root = root is None
        self.root = Path(tempfile.mkdtemp(prefix="cudal1-ref-", dir=scratch_root())) if root is None else root
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o711)  # a sandboxed worker may traverse to its own directory, not list others
        self.init_seed = new_seed()
        self.path = self.root / "reference" / "reference.py"
        self.path.parent.mkdir(mode=0o700)
        self.path.write_text(problem.source)
        prefetch_draws(config)  # compiled (once per machine) while the worker starts
        self.worker = self._new_worker()
        self.build_s = 0.0
        self.graphed = False  # its worker replays inputs from a captured graph (inputs.GraphedInputs)
        self.device_draws = False  # its worker draws timed inputs with the harness's kernels (device_draws.py)
        self.stateful = False  # its output depends on earlier calls: reset before each candidate (reset())
        self._loaded = False
        self._failure = ""
        self._lock = threading.Lock()  # a batch may load it ahead from another thread
        if load:
            self.load()

    def load(self) -> None:
        """Build the reference model in its worker (once); raises ReferenceError, then again on every call."""
        with self._lock:
            self._load()

    def _load(self) -> None:
        if self._loaded:
            return
        if self._failure:
            raise ReferenceError(self._failure)
        try:
            self.worker.wait_ready(self.config.load_timeout_s)
            reply = self.worker.call({"cmd": "load", "role": "reference", "reference_path": str(self.path),
                                      "init_seed": self.init_seed, "device_draws": draws_path(self.config)},
                                     self.config.build_timeout_s)
        except WorkerFailure as exc:
            self._failure = f"{self.problem.problem_id}: reference failed to start: {exc.message}"
        else:
            if not reply.get("ok"):
                self._failure = f"{self.problem.problem_id}: reference failed to load: {reply.get('error')}"
        if self._failure:
            self.close()
            raise ReferenceError(self._failure)
        self.build_s = reply.get("build_s", 0.0)
        self.graphed = bool(reply.get("graphed"))
        self.device_draws = bool(reply.get("device_draws"))
        self.stateful = bool(reply.get("stateful"))
        self._loaded = True

    def reset(self) -> None:
        """Build the reference model again, fresh: a stateful reference then sees the same calls as the
        candidate evaluated next (one per correctness trial, then the same timed batches)."""
        self.load()
        reply = self.worker.call({"cmd": "reset"}, self.config.build_timeout_s)
        if not reply.get("ok"):
            raise ReferenceError(f"{self.problem.problem_id}: reference failed to reset: {reply.get('error')}")

    def records(self, seeds: list[int]) -> list[dict[str, Any]]:
        """Inputs and outputs of the reference for each seed, in the parent's memory. One seed per
        command, so the worker never holds more than one record's export at a time."""
        self.load()
        records: list[dict[str, Any]] = []
        for seed in seeds:
            out = self.worker.workdir / f"records-{secrets.token_hex(8)}.pt"
            reply = self.worker.call({"cmd": "reference", "seeds": [seed], "out_path": str(out)},
                                     self.config.run_timeout_s)
            got = self._payload(reply, out, "to run")
            if not isinstance(got, list) or len(got) != 1:
                raise ReferenceError(f"{self.problem.problem_id}: reference sent {type(got).__name__}, not records")
            records += got
        return records

    def warm(self, seed: int) -> None:
        """One untimed forward on fresh inputs (the warm-up before a timed batch, as its own command)."""
        self.load()
        reply = self.worker.call({"cmd": "warm", "seed": seed}, self.config.run_timeout_s)
        if not reply.get("ok"):
            raise ReferenceError(f"{self.problem.problem_id}: reference failed to warm up: {reply.get('error')}")

    def time(self, msg: dict[str, Any]) -> tuple[dict[str, Any], float, dict[str, Any]]:
        self.load()
        spot_path = self.worker.workdir / f"spot-{secrets.token_hex(8)}.pt"
        t0 = time.perf_counter()
        reply = self.worker.call(msg | {"spot_path": str(spot_path)}, self.config.run_timeout_s)
        wall = time.perf_counter() - t0
        return reply, wall, self._payload(reply, spot_path, "while timed") or {}

    def _payload(self, reply: dict[str, Any], path: Path, what: str) -> Any:
        """What a reference reply carried; any failure is the problem's, not a candidate's."""
        if not reply.get("ok"):
            raise ReferenceError(f"{self.problem.problem_id}: reference failed {what}: {reply.get('error')}")
        try:
            return receive_payload(reply, path, self.config, self.worker)
        except TransportError as exc:
            raise ReferenceError(f"{self.problem.problem_id}: reference outputs unreadable: {exc}") from exc

    def restart(self) -> None:
        """Stop the worker, giving back all its device memory, and start a fresh one that loads the same
        reference (same init seed) on its next use: room for a re-measurement's own workers beside it."""
        with self._lock:
            self.worker.close()
            self.worker = self._new_worker()
            self._loaded = False

    def _new_worker(self) -> WorkerProcess:
        return WorkerProcess(worker_spec(self.config, self.problem), self.root / "reference", "reference")

    def healthy(self) -> bool:
        """No failure recorded and its worker still running: fit to serve another batch (kept.py)."""
        return not self._failure and self.worker.proc.poll() is None

    def close(self) -> None:
        if hasattr(self, "worker"):
            self.worker.close()
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> ReferenceSession:
        return self

    def close_beside(self) -> None:
        """Close beside the device loop within a batch (closing.CLOSER; the next timing there waits for it),
        at once outside one: a batch's problem ends, or a kept reference is let go (kept.py)."""
        CLOSER.close(self.config.device, self.close)

    def __exit__(self, *exc: object) -> None:
        self.close_beside()


class ReferenceError(RuntimeError):
    """The problem's own reference could not run: not the candidate's fault."""


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
                                     warm_compile=warm_compile), work, "candidate")


def device_name(device: str) -> str:
    """A name that says which hardware measured: 'cpu' or the CUDA device's product name."""
    if device.startswith("cuda") and torch.cuda.is_available():
        index = int(device.split(":")[1]) if ":" in device else 0
        return torch.cuda.get_device_name(index)
    return "cpu"
