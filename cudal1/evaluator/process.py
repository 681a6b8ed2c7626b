"""Parent side of a worker: spawn it in its own session, talk over private pipes, bound every call,
and kill the whole process group when a call overruns or the worker is done."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import selectors
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudal1.evaluator import sandbox
from cudal1.evaluator.forking import ForkedProcess, fork_worker, start_fork_server
from cudal1.evaluator.sandbox import (
    SHARED_UMASK,
    TABLE,
    candidate_group,
    fresh_uid,
    process_info,
    reaches_state,
    repo_root,
    take_tree,
)
from cudal1.evaluator.toolchain import cpath, first_on_path

# How long the parent waits for a worker to fall asleep before reading its CPU (WorkerProcess.wait_asleep):
# well above the 2.4 ms the longest honest wake-up took on the 2-core CPU machine
SETTLE_S = 0.010

# Only these reach a worker: no API keys, no tracking URIs, nothing a candidate could exfiltrate or use.
_ENV_PASS = ("PATH", "HOME", "LANG", "LC_ALL", "CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES",
             "NVIDIA_VISIBLE_DEVICES", "TORCH_CUDA_ARCH_LIST", "CC", "CXX", "MAX_JOBS",
             "PYTHONPYCACHEPREFIX")  # bytecode the parent compiled; read only to a worker (which writes none)


# A worker's own environment, set after the fork; everything else is fixed when the fork server starts.
# TORCH_CUDA_ARCH_LIST is read by builds only (after the fork), and a batch fixes it (builds.pin_cuda_arch)
# after a fork server may have started (prestart_fork_server).
_PER_WORKER = {"TMPDIR", "HOME", "USER", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "TORCH_EXTENSIONS_DIR",
               "CUDA_VISIBLE_DEVICES", "CPATH", "TORCH_CUDA_ARCH_LIST"}


def base_env(threads: int) -> dict[str, str]:
    """What every worker's environment holds before its own directories: what passes from this process,
    the threads, the malloc thresholds, and the fail-fast ninja first on PATH."""
    env = {k: os.environ[k] for k in _ENV_PASS if k in os.environ}
    env.update({
        "PYTHONPATH": repo_root(),
        "PYTHONDONTWRITEBYTECODE": "1",
        "OMP_NUM_THREADS": str(threads),  # a candidate's OpenMP gets what the reference gets
        "MKL_NUM_THREADS": str(threads),
        "TORCHINDUCTOR_COMPILE_THREADS": "1",  # no compile subprocess pool inside a worker
        # Fixed glibc malloc thresholds: by default glibc raises its mmap threshold after the first
        # large free, so two identical processes with different histories can differ 3x on a small
        # elementwise op (page faults on every call in one, none in the other). Measured here.
        "MALLOC_MMAP_THRESHOLD_": str(32 * 2**20),
        "MALLOC_TRIM_THRESHOLD_": str(2**31),
    })
    # torch's extension builds run a ninja that stops at the first failed compile (toolchain.py)
    if (path := first_on_path(env.get("PATH"))) is not None:
        env["PATH"] = path
    return env


def prestart_fork_server(threads: int = 1) -> None:
    """Start the fork server that workers of ``threads`` threads will be forked from, before this process
    imports torch: the server's own ``import torch`` (about 2 s on the H100 hosts)
    then runs beside the parent's instead of after it. For one-shot commands (``cudal1 evaluate-one``);
    where the environment changes before the first worker, that worker gets a server of its own, as
    without this."""
    start_fork_server(_server_env(base_env(threads)))


def _server_env(env: dict[str, str]) -> dict[str, str]:
    """A worker's environment less what is set after the fork: what its fork server is started with, and
    keyed by (a server started ahead is found again only where the two are derived alike)."""
    return {k: v for k, v in env.items() if k not in _PER_WORKER}


class WorkerFailure(Exception):
    """The worker died, overran its bound, or broke protocol. ``kind`` is a Status value."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


@dataclass
class WorkerSpec:
    device: str = "cpu"
    threads: int = 1
    memory_limit_mb: int = 0
    flush_l2: bool = True
    extensions_dir: Path | None = None  # TORCH_EXTENSIONS_DIR: keyed by candidate hash, shared across runs
    sandbox_user: bool = True  # when the parent is root: run the worker as a fresh, unprivileged uid
    hide_gpus: bool = False  # CUDA_VISIBLE_DEVICES="" (build workers: compile without touching a GPU)
    fd_transport: bool = True  # CUDA: hand device memory over as file descriptors (else files)
    nice: int = 0  # CPU priority; build workers run at 19 so compiles never starve the timing path
    core: int | None = None  # CPU device: the core a problem's timed workers share (workers.cpu_core_for)
    warm_compile: bool = False  # torch.compile's own start (Inductor's imports, a stand-in compile) at start
    compiles: bool = False  # a torch.compile program's: its fork server makes its warm imports first (zygote)
    cores: tuple[int, ...] = ()  # a build worker's cores on a GPU's host: those no device times on


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def worker_env(spec: WorkerSpec, workdir: Path) -> dict[str, str]:
    """A worker's whole environment: :func:`base_env`, its own directory for temporary files and caches, and
    its candidate's build folder (extensions, torch.compile's caches) where it has one."""
    env = base_env(spec.threads)
    env.update({
        "TMPDIR": str(workdir),
        "HOME": str(workdir),  # caches (inductor, triton) land in the worker's own directory
        "USER": "cudal1-sandbox",  # getpass.getuser() works for a uid without a passwd entry
        "TORCHINDUCTOR_CACHE_DIR": str(workdir / "inductor"),
        "TRITON_CACHE_DIR": str(workdir / "triton"),
    })
    if spec.hide_gpus:
        env["CUDA_VISIBLE_DEVICES"] = ""
    if spec.extensions_dir is not None:
        spec.extensions_dir.mkdir(parents=True, exist_ok=True)
        # A build killed at its timeout leaves torch's lock file behind, and every later build of the
        # same source would wait on it forever. A candidate's builds are done before its workers
        # start (schedule.submit_builds); a second worker of it (sandbox.py) finds them built.
        for stale in spec.extensions_dir.glob("*/lock"):
            stale.unlink(missing_ok=True)
        env["TORCH_EXTENSIONS_DIR"] = str(spec.extensions_dir)
        # GCC finds the precompiled torch/extension.h of the extensions root first (toolchain.py)
        env["CPATH"] = cpath(spec.extensions_dir.parent, os.environ.get("CPATH"))
        # torch.compile's caches beside the extensions, keyed by the same source hash: the build worker's
        # warm-up fills them, the timed worker and its re-checks hit them. Only the same source ever
        # reads what a program wrote there, as for its extensions.
        env["TORCHINDUCTOR_CACHE_DIR"] = str(spec.extensions_dir / "inductor")
        env["TRITON_CACHE_DIR"] = str(spec.extensions_dir / "triton")
    return env


def worker_options(spec: WorkerSpec) -> list[str]:
    """The worker's command-line options (worker_main), its descriptors aside."""
    options = ["--device", spec.device, "--threads", str(spec.threads), "--memory-limit-mb", str(spec.memory_limit_mb)]
    if not spec.flush_l2:
        options.append("--no-flush-l2")
    if spec.core is not None:
        options += ["--core", str(spec.core)]
    if spec.warm_compile:
        options.append("--warm-compile")
    if spec.cores:
        options += ["--cores", ",".join(map(str, spec.cores))]
    return options


class WorkerProcess:
    """One isolated worker in its own directory. Use as a context manager; ``close`` always kills."""

    def __init__(self, spec: WorkerSpec, workdir: Path, name: str) -> None:
        self.spec = spec
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.name = name
        self.log_path = workdir / f"{name}.log"
        self.uid = fresh_uid() if spec.sandbox_user else None
        cmd_r, self._cmd_w = os.pipe()
        self._rep_r, rep_w = os.pipe()
        # CUDA workers hand device memory to the parent as file descriptors (cudal1.evaluator.transport).
        self.fd_sock: socket.socket | None = None
        child_sock: socket.socket | None = None
        if spec.device.startswith("cuda") and not spec.hide_gpus and spec.fd_transport:
            self.fd_sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = worker_env(spec, workdir)
        self._log = open(self.log_path, "wb")
        as_user = self._take_folders()
        pass_fds = [cmd_r, rep_w, *([child_sock.fileno()] if child_sock is not None else [])]
        self.proc: subprocess.Popen | ForkedProcess = self._start(env, as_user, pass_fds)
        os.close(cmd_r)
        os.close(rep_w)
        if child_sock is not None:
            child_sock.close()
        # Its age: no process older than it can be one it started (sandbox.ProcessTable). 0 reads every process.
        self.started_tick = info.start if (info := process_info(self.pid)) is not None else 0
        self._buffer = b""
        self._ready: bool = False
        sandbox.track(self)  # killed with what it started if the parent gets SIGTERM (sandbox.reap_on_term)

    def _take_folders(self) -> dict[str, object]:
        """As a fresh uid, the worker's directory becomes its own and its candidate's build folder is shared
        with the candidate's other workers (a re-check's twin, see sandbox.py); returns the user and groups
        it is started as (none where it runs as this process's user)."""
        self.groups: list[int] = []
        if self.uid is None:
            return {}
        take_tree(self.workdir, self.uid)
        if self.spec.extensions_dir is not None:
            self.groups = [candidate_group(self.spec.extensions_dir)]
            take_tree(self.spec.extensions_dir, self.uid, self.groups[0])
        return {"user": self.uid, "group": self.uid, "extra_groups": self.groups,
                "umask": SHARED_UMASK if self.groups else -1}

    def _start(self, env: dict[str, str], as_user: dict[str, object], pass_fds: list[int]
               ) -> subprocess.Popen | ForkedProcess:
        """The worker's process: forked from a server that has torch imported (cudal1.evaluator.zygote), else
        started afresh. ``pass_fds``: its command and reply pipes' ends, and its descriptor socket's."""
        options = worker_options(self.spec)
        # a forked worker's descriptors, numbered there
        fd_options = ["--cmd-fd", "{0}", "--reply-fd", "{1}", *(["--fd-sock", "{2}"] if len(pass_fds) > 2 else [])]
        forked = fork_worker(_server_env(env), env, [*fd_options, *options], str(self.workdir), self.uid,
                             [self._log.fileno(), *pass_fds], self.spec.nice, self.groups, self.spec.compiles)
        if forked is not None:
            return forked
        argv = [sys.executable, "-m", "cudal1.evaluator.worker_main", *(o.format(*pass_fds) for o in fd_options),
                *options]
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log, cwd=self.workdir,
                                env=env, pass_fds=pass_fds, start_new_session=True, **as_user)  # type: ignore[arg-type]
        if self.spec.nice:
            # Set before the first command, so the compilers it later starts inherit the priority.
            os.setpriority(os.PRIO_PROCESS, proc.pid, self.spec.nice)
        return proc

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        if not self._ready:
            self._read_reply(timeout_s, "start")
            self._ready = True

    def is_ready(self) -> bool:
        """Whether the worker's start is over, without waiting: its "ready" line (or a death, which the
        next command reports) has arrived."""
        if self._ready or b"\n" in self._buffer:
            return True
        with selectors.DefaultSelector() as sel:
            sel.register(self._rep_r, selectors.EVENT_READ)
            if not sel.select(timeout=0):
                return False
        chunk = os.read(self._rep_r, 1 << 16)
        self._buffer += chunk
        return not chunk or b"\n" in self._buffer

    def call(self, msg: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        self.wait_ready()
        if self.fd_sock is not None:
            from cudal1.evaluator.transport import drain

            drain(self.fd_sock)  # nothing sent before this command can pass for its reply's memory
        nonce = secrets.token_hex(8)
        try:
            os.write(self._cmd_w, (json.dumps(msg | {"nonce": nonce}) + "\n").encode())
        except BrokenPipeError:
            raise self._death(msg["cmd"]) from None
        reply = self._read_reply(timeout_s, msg["cmd"])
        # A reply must answer this command and come alone: anything else was written by someone else.
        if reply.get("nonce") != nonce or self._buffer.strip():
            self.kill()
            raise WorkerFailure("rejected", f"{msg['cmd']}: a reply that the harness did not write arrived on its "
                                "private pipe (forged protocol message)")
        return reply

    def _read_reply(self, timeout_s: float, what: str) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        with selectors.DefaultSelector() as sel:
            sel.register(self._rep_r, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                left = deadline - time.monotonic()
                if left <= 0:
                    self.kill()
                    raise WorkerFailure("timeout", f"{what} exceeded {timeout_s:g} s; the process group was killed")
                if not sel.select(timeout=min(left, 1.0)):
                    if self.proc.poll() is not None:
                        raise self._death(what)
                    continue
                chunk = os.read(self._rep_r, 1 << 16)
                if not chunk:
                    raise self._death(what)
                self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            reply = json.loads(line)
        except json.JSONDecodeError:
            self.kill()
            raise WorkerFailure("runtime_error", f"{what}: the worker sent a malformed reply") from None
        if not isinstance(reply, dict):
            raise WorkerFailure("runtime_error", f"{what}: the worker sent a malformed reply")
        return reply

    def _death(self, what: str) -> WorkerFailure:
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        self.kill()
        tail = self.log_tail()
        if code is None:
            how = "closed its reply pipe"
        elif code < 0:
            how = f"was killed by {_signal_name(code)}"
        else:
            how = f"exited with code {code}"
        hint = " (out of memory?)" if code == -signal.SIGKILL else ""
        return WorkerFailure("runtime_error", f"the process {how} during {what}{hint}" + (f": {tail}" if tail else ""))

    def log_tail(self, chars: int = 600) -> str:
        try:
            text = self.log_path.read_bytes()[-chars:].decode("utf-8", "replace").strip()
        except OSError:
            return ""
        return text

    def stray_processes(self) -> list[int]:
        """Processes the worker started: its session, its children, and (sandboxed) anything with its uid,
        which also finds a double-forked child that left the session with setsid(). Of the host's processes,
        those that may be its (sandbox.ProcessTable: none older than it is)."""
        return [p.pid for p in TABLE.candidates(self.started_tick, self.uid) if p.pid != self.pid and p.state != "Z"
                and (p.session == self.pid or p.ppid == self.pid or (self.uid is not None and p.uid == self.uid))]

    def pause(self) -> None:
        """Stop every process of the worker's group (SIGSTOP: it cannot be caught) until :meth:`resume`."""
        with contextlib.suppress(ProcessLookupError, PermissionError):  # gone (the next call says so)
            os.killpg(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGCONT)

    def wait_stopped(self, timeout_s: float = 5.0) -> bool:
        """Wait until /proc shows the worker stopped. A worker that stops itself after a reply gets there
        microseconds after the parent reads it (later on a busy host), and a SIGCONT sent before that would
        be lost, leaving it stopped for good. False when it did not stop in time, is gone, or /proc is absent."""
        return reaches_state(self.pid, ("T", "t"), timeout_s)

    def wait_asleep(self, timeout_s: float = SETTLE_S) -> bool:
        """Wait until /proc shows the worker's main thread asleep (its wait for the next command). A worker
        just continued after a stop (SIGCONT) runs its way back there for 0.3-2.4 ms of CPU; read over the
        reference's warm-up that followed at once, that tail made an honest program look like one that left
        a thread running (docs/evaluator.md at 88f971b, "An honest program rejected for its own wake-up"). Bounded: a
        worker kept from its wait (a thread holding the GIL) is read as it is, and its CPU counts. False when
        it did not fall asleep in time, is gone, or /proc is absent."""
        return reaches_state(self.pid, ("S",), timeout_s)

    def kill(self) -> None:
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        # A candidate may have escaped the group with setsid(): kill its session members by pid too.
        for pid in self.stray_processes():
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def close(self) -> None:
        # Idempotent: a reference taken early can be closed by the scheduler's release and again by its
        # session; a second drain on the closed socket raised EBADF and stopped a GPU augment run.
        if getattr(self, "_closed", False):
            return
        self._closed = True
        sandbox.forget(self)
        if self.proc.poll() is None:
            try:
                os.write(self._cmd_w, b'{"cmd": "exit"}\n')
                self.proc.wait(timeout=2)
            except (BrokenPipeError, subprocess.TimeoutExpired, OSError):
                pass
        self.kill()
        for fd in (self._cmd_w, self._rep_r):
            try:
                os.close(fd)
            except OSError:
                pass
        if self.fd_sock is not None:
            from cudal1.evaluator.transport import drain

            drain(self.fd_sock)
            self.fd_sock.close()
        self._log.close()

    def __enter__(self) -> WorkerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
