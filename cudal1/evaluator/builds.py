"""Builds of a batch: candidates that compile extensions are built (and, when they compile on their first
call, warmed up on the GPU) in throwaway workers at the lowest CPU priority, into the shared cache keyed
by their source hash, while the devices time other candidates; and every build pauses while a device
times (:data:`QUIET`)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Executor, Future
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from cudal1.candidates import Candidate
from cudal1.evaluator import toolchain
from cudal1.evaluator.config import EvalConfig
from cudal1.evaluator.core import load_candidate
from cudal1.evaluator.extensions import mentions_builds
from cudal1.evaluator.process import WorkerFailure, WorkerProcess, WorkerSpec
from cudal1.evaluator.sandbox import processes, repo_root, spare_cores
from cudal1.evaluator.toolchain import damaged_builds
from cudal1.evaluator.workers import extensions_folder, new_seed
from cudal1.problems import Problem


class Quiet:
    """Stops the build workers, and every compiler they started, while a device times a candidate. Builds
    at the lowest priority beside the timing made two cold runs of the same rows differ by a median 3%
    and the wall-clock check reject rows in one run and not the other; launch-bound programs moved most.
    Builds only pause: they resume when no device is timing."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.workers: set[WorkerProcess] = set()
        self.depth = 0  # timings in progress, over every device
        self.keys: dict[WorkerProcess, str] = {}  # a build worker's candidate (source hash)
        self.free: Counter[str] = Counter()  # builds let go by devices waiting for them (letting_go)

    def _held(self, workers: Iterable[WorkerProcess]) -> list[WorkerProcess]:
        """Those to be stopped now: every build not let go, while any device times."""
        return [w for w in workers if self.depth > 0 and self.free[self.keys.get(w, "")] <= 0]

    def add(self, worker: WorkerProcess, key: str = "") -> None:
        with self.lock:
            self.workers.add(worker)
            if key:
                self.keys[worker] = key
            self._signal(signal.SIGSTOP, self._held([worker]))

    def discard(self, worker: WorkerProcess) -> None:
        """No longer stopped for timing, and running now: a worker taken out while another device times
        would otherwise stay stopped for good (on two H200s, loads waited out their 120 s start that way)."""
        with self.lock:
            if worker in self.workers:
                stopped = bool(self._held([worker]))
                self.workers.discard(worker)
                self.keys.pop(worker, None)
                if stopped:
                    self._signal(signal.SIGCONT, [worker])

    @contextmanager
    def letting_go(self, keys: set[str]) -> Iterator[None]:
        """The builds of these candidates go on while a device times: a device is idle waiting for them.
        On two GPUs a device otherwise waits for builds paused by the other device's timing; letting every
        build go on instead widened the spread between runs, so only those a waiting device needs go (on
        the spare cores, at nice 19)."""
        keys = {k for k in keys if k}
        with self.lock:
            self.free.update(keys)
            if self.depth:
                self._signal(signal.SIGCONT, [w for w in self.workers if self.keys.get(w) in keys])
        try:
            yield
        finally:
            with self.lock:
                self.free.subtract(keys)
                held = {k for k in keys if self.free[k] <= 0}
                for k in held:
                    del self.free[k]
                if self.depth:
                    self._signal(signal.SIGSTOP, [w for w in self.workers if self.keys.get(w) in held])

    @contextmanager
    def holding(self, worker: WorkerProcess, key: str = "") -> Iterator[None]:
        """A build worker (of the candidate ``key``) stopped whenever a device times, until the block ends."""
        self.add(worker, key)
        try:
            yield
        finally:
            self.discard(worker)

    def _signal(self, sig: int, workers: Iterable[WorkerProcess]) -> None:
        leaders = {w.pid for w in workers}
        if not leaders:
            return
        uids = {w.uid for w in workers if w.uid is not None}
        for _pass in range(2 if sig == signal.SIGSTOP else 1):  # again for children started meanwhile
            for pid in _members(leaders, uids):
                try:
                    os.kill(pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass

    @contextmanager
    def __call__(self) -> Iterator[None]:
        """A device times."""
        with self.lock:
            before = set(self._held(self.workers))
            self.depth += 1
            self._signal(signal.SIGSTOP, [w for w in self._held(self.workers) if w not in before])
        try:
            yield
        finally:
            with self.lock:
                before = set(self._held(self.workers))
                self.depth -= 1
                self._signal(signal.SIGCONT, [w for w in before if w not in self._held(self.workers)])


def _members(leaders: set[int], uids: set[int]) -> list[int]:
    """Processes in the sessions led by ``leaders`` or owned by ``uids`` (ninja puts each compiler in
    its own process group, so a signal to the worker's group would miss them)."""
    return [p.pid for p in processes() if p.pid in leaders or p.session in leaders or p.uid in uids]


QUIET = Quiet()


_WARM_SLOTS: dict[str, threading.Semaphore] = {}  # GPU warm-ups at a time, per device
_WARM_LOCK = threading.Lock()


def _warm_slot(device: str) -> threading.Semaphore:
    with _WARM_LOCK:
        return _WARM_SLOTS.setdefault(device, threading.Semaphore(2))


def _build_cores(config: EvalConfig) -> tuple[int, ...]:
    """A GPU's host: builds keep off the devices' timed cores (sandbox.spare_cores)."""
    return tuple(sorted(spare_cores() or ())) if config.is_cuda else ()


def prebuild(problem: Problem, candidate: Candidate, config: EvalConfig, extensions_root: Path) -> str:
    """Build a candidate once in throwaway workers so its extension lands in the shared cache keyed by
    the source hash; returns an error message or ''. Failures are left for the timed evaluation to
    report: it fails the same way (a failed compile is remembered, see extensions.py) and records it.

    Step 1 imports the program and constructs it on the CPU. A program that built nothing there (it
    compiles on its first ``forward``: ~30 of CUDA-L1's H100 programs) gets step 2: constructed on the
    GPU and called once, two such warm-ups per device at a time. Their kernels run beside the timing of
    another candidate, a brief load on the device; without it each of those programs compiled for
    13-85 s on the timed path with the device idle. A program
    that calls ``torch.compile`` (the compile baselines) is one of those: its step 2 fills the inductor
    and Triton caches of its source's folder, which the timed worker and its re-checks read."""
    root = Path(tempfile.mkdtemp(prefix="cudal1-build-"))
    ext_dir = extensions_folder(extensions_root, candidate)
    # Step 1 puts nothing on the GPU another candidate is being timed on. The GPUs stay visible, because
    # CUDA-L1's programs compile only when torch.cuda.is_available() (measured: hiding them left 15-30 s
    # builds on the timed path). TORCH_CUDA_ARCH_LIST is fixed by evaluate_many so every worker compiles
    # the same thing.
    spec = WorkerSpec("cpu", config.cpu_threads, 0, flush_l2=False, nice=19, extensions_dir=ext_dir,
                      cores=_build_cores(config))
    try:
        root.chmod(0o711)
        work = root / "w"
        work.mkdir(mode=0o700)
        (work / "candidate.py").write_text(candidate.source)
        (work / "reference.py").write_text(problem.source)
        # Step 1 may be let go while a device times, when a device waits for it; step 2 runs on a GPU,
        # which the other device may be timing on: it stays stopped then.
        with WorkerProcess(spec, work, "build") as worker, QUIET.holding(worker, candidate.sha256):
            reply = load_candidate(worker, 0, config, build_only=True)
        if not reply.get("ok"):
            return str(reply.get("error", "failed"))
        if (reply.get("builds") or {}).get("calls", 0) > 0 or not config.is_cuda:
            return ""
        warm_spec = WorkerSpec(config.device, config.cpu_threads, 0, flush_l2=False, nice=19,
                               extensions_dir=ext_dir, fd_transport=False, cores=_build_cores(config))
        with _warm_slot(config.device), WorkerProcess(warm_spec, work, "warm") as worker, QUIET.holding(worker):
            reply = load_candidate(worker, 0, config)  # as the timed worker loads: its caches are filled
            if reply.get("ok"):
                reply = worker.call({"cmd": "warm", "seed": new_seed()}, config.build_timeout_s + config.run_timeout_s)
        return "" if reply.get("ok") else str(reply.get("error", "failed"))
    except WorkerFailure as exc:
        return exc.message
    finally:
        shutil.rmtree(root, ignore_errors=True)


def timed_prebuild(problem: Problem, candidate: Candidate, config: EvalConfig,
                   extensions_root: Path) -> tuple[str, float]:
    """:func:`prebuild` and its wall clock in seconds, pauses for other candidates' timing included:
    what a cold batch's waits for builds are made of (``extra.prebuild_s`` of the evaluation); 0.0 when
    an earlier batch prebuilt the same program for the same problem into this cache (:func:`prebuilt`)."""
    if prebuilt(problem, candidate, config, extensions_root):
        return "", 0.0
    t0 = time.perf_counter()
    error = prebuild(problem, candidate, config, extensions_root)
    if not error and damaged_builds(extensions_folder(extensions_root, candidate)):
        # another ninja wrote the same folder meanwhile (a killed run's compile): mend it here, not in the load
        error = prebuild(problem, candidate, config, extensions_root)
    if not error:
        _mark_prebuilt(problem, candidate, config, extensions_root)
    return error, round(time.perf_counter() - t0, 3)


def _marker(candidate: Candidate, extensions_root: Path) -> Path:
    # Beside the candidates' folders, in one the parent owns: a program's own worker can write its
    # folder, not this one (a forged mark would only move its own build into its load, never a timing).
    return extensions_root / ".prebuilt" / candidate.sha256


def _prebuilt_key(problem: Problem, config: EvalConfig) -> str:
    # What a prebuild's products depend on beyond the source: the problem's shapes (step 2's warm-up), the
    # device kind and the architectures compiled for (the extensions root is already per torch version).
    return f"{problem.sha256} {'cuda' if config.is_cuda else 'cpu'} {os.environ.get('TORCH_CUDA_ARCH_LIST', '')}"


def prebuilt(problem: Problem, candidate: Candidate, config: EvalConfig, extensions_root: Path) -> bool:
    """Whether an earlier batch's prebuild of ``candidate`` for ``problem`` succeeded into this cache, whose
    folder for it is still there. A warm run then starts no build worker for it: on two H100s the build
    workers of warm runs of 53 programs, every build cached, took 127-150 s of wall (pauses included)
    importing and constructing them, beside the loads, and ran the first-call warm-ups on the GPUs again.
    A folder holding a build whose ninja deps log is damaged is not prebuilt: its timed load would compile
    again (toolchain.damaged), so the prebuild mends it off the timed path."""
    marker = _marker(candidate, extensions_root)
    folder = extensions_folder(extensions_root, candidate)
    try:
        return (marker.read_text() == _prebuilt_key(problem, config) and any(folder.iterdir())
                and not damaged_builds(folder))
    except OSError:
        return False


def _mark_prebuilt(problem: Problem, candidate: Candidate, config: EvalConfig, extensions_root: Path) -> None:
    marker = _marker(candidate, extensions_root)
    try:
        marker.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        partial = marker.with_suffix(f".{os.getpid()}.{threading.get_ident()}")
        partial.write_text(_prebuilt_key(problem, config))
        partial.replace(marker)  # whole or absent: two batches may mark the same program
    except OSError:
        pass  # only a later batch's saving is lost


@dataclass(eq=False)
class _Compile:
    """A compile the parent started, as :class:`Quiet` sees a build worker: its session, no uid of its own."""

    pid: int
    uid: int | None = None


def wants_header(candidates: Iterable[Candidate], config: EvalConfig) -> bool:
    """Whether a batch compiles the precompiled torch header: on a GPU host, for enough extension builds
    to make up its own compile. On a CPU device the timing would pause it most of the time."""
    return config.is_cuda and len({c.sha256 for c in candidates if mentions_builds(c.source)}) >= toolchain.MIN_BUILDS


def header_beside(executor: Executor, candidates: Iterable[Candidate], extensions_root: Path,
                  config: EvalConfig, stop: threading.Event | None = None) -> Future[tuple[str, float]] | None:
    """The batch's precompiled torch header started in ``executor``, beside the build pool rather than in a
    build slot (the builds that start before it is there parse the header themselves, with the same
    result); None when the batch does not want one (:func:`wants_header`). ``stop``: set when the batch's
    evaluations are done, which ends a compile still running (:func:`prebuild_header`)."""
    if not wants_header(candidates, config):
        return None
    return executor.submit(prebuild_header, extensions_root, config, stop)


def prebuild_header(extensions_root: Path, config: EvalConfig, stop: threading.Event | None = None) -> tuple[str, float]:
    """The precompiled torch header of the batch's builds (cudal1.evaluator.toolchain), compiled once in a
    process of its own as a build is: at nice 19, on the build cores, paused while a device times.
    Returns (what happened or the error, wall seconds); a failure only costs the builds their speed-up.
    Once ``stop`` is set the compile is killed and its half-written header removed: no build is left to
    use it, and a batch whose devices timed all along (two GPUs, a cold cache) kept it paused to the end,
    then waited for it before returning. The next batch compiles it again."""
    t0 = time.perf_counter()
    cores = _build_cores(config)
    # Priority and cores are set by the process itself (a preexec_fn is unsafe in this threaded parent).
    argv = [sys.executable, "-m", "cudal1.evaluator.toolchain", str(extensions_root), "--nice", "19",
            *(["--cores", ",".join(map(str, cores))] if cores else [])]
    env = os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, [repo_root(), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)
    handle = _Compile(proc.pid)
    QUIET.add(handle)
    try:
        out, ended = _until(proc, config.build_timeout_s, stop)
    finally:
        QUIET.discard(handle)
    lines = [line for line in (out or "").strip().splitlines() if not line.startswith(toolchain.SCRATCH_LINE)]
    if ended is not None:
        message = ended
    elif proc.returncode == 0 and lines:
        message = lines[-1]
    else:
        message = f"error: {' | '.join(lines[-3:])[-600:]}"
    return message, round(time.perf_counter() - t0, 3)


def _until(proc: subprocess.Popen[str], timeout_s: float, stop: threading.Event | None) -> tuple[str, str | None]:
    """The header compile's output, and why it was ended (None: it ended by itself): killed, its session
    with it, after ``timeout_s`` or once ``stop`` is set, its scratch directory removed."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return proc.communicate(timeout=0.5)[0], None  # again after a timeout loses no output
        except subprocess.TimeoutExpired:
            if stop is not None and stop.is_set():
                why = "stopped: the batch's evaluations were done first"
            elif time.monotonic() >= deadline:
                why = f"error: timed out after {timeout_s} s"
            else:
                continue
        os.killpg(proc.pid, signal.SIGKILL)  # a compile paused by QUIET dies as well
        out = proc.communicate()[0] or ""
        for line in out.splitlines():
            if line.startswith(toolchain.SCRATCH_LINE):
                shutil.rmtree(line[len(toolchain.SCRATCH_LINE):], ignore_errors=True)
        return out, why


def pin_cuda_arch(devices: Sequence[str]) -> None:
    """Fix TORCH_CUDA_ARCH_LIST (workers inherit it) to the devices' compute capabilities, unless the user
    set it: a build worker that sees no GPU then compiles exactly what the timed worker would, and both
    hit the same cached build."""
    import torch

    if os.environ.get("TORCH_CUDA_ARCH_LIST") or not torch.cuda.is_available():
        return
    caps = sorted({torch.cuda.get_device_capability(int(d.split(":")[1]) if ":" in d else 0) for d in devices})
    os.environ["TORCH_CUDA_ARCH_LIST"] = ";".join(f"{major}.{minor}" for major, minor in caps)
