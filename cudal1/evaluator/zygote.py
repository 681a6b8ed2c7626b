"""A fork server for evaluator workers: one process imports torch and the worker module once, then forks
a fresh worker for each request, so a worker is ready in milliseconds instead of paying the interpreter
and ``import torch`` (1.5 s on a 2-core CPU machine, 1.6-3.5 s on the GPU hosts) every time.

Started by :mod:`cudal1.evaluator.process` as ``python -m cudal1.evaluator.zygote --sock-fd N`` with the
environment that must be in place before torch loads (threads, malloc thresholds, PYTHONPATH). It never
runs untrusted code and never touches a GPU: CUDA is initialised by each child, after the fork. A child
becomes exactly what ``python -m cudal1.evaluator.worker_main`` under ``subprocess.Popen`` would be: its own
session, stdin /dev/null, stdout and stderr to its log, only the descriptors it was given, its
directory, its environment and (as root) a fresh uid whose only other group is its candidate's build
folder's (:mod:`cudal1.evaluator.sandbox`), set before any of its code runs.

Protocol, over a SOCK_SEQPACKET pair: the parent sends a JSON request (id, argv, cwd, env, uid, groups, and
``compile``: a torch.compile program's worker) with the worker's descriptors attached; the server answers
``{"id", "pid", "warm"}`` (pid null where it cannot fork; warm: whether the fork came after the warm
imports), and ``{"exit": pid, "code"}`` when it reaps a child (the parent is not the child's parent and
cannot wait for it itself). The server exits when the parent's end closes.

Imports torch and the standard library only, and torch.compile's machinery (``_WARM``), which only
torch.compile programs use: on a GPU's host (``--warm idle``, the parent's choice) once the parent has been
quiet for a moment and on the cores no device times on, so the first workers a batch asks for do not wait
for them; on a machine of a few cores (``--warm asked``) just before it forks the first torch.compile
program's worker, which would otherwise make them itself, so a batch without such a program never pays
for them (about 1.4 CPU-s a server on a 2-core CPU machine).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import select
import signal
import socket
import sys
import tempfile
from typing import Any

import torch  # noqa: F401 - the point: every child starts with torch imported

from cudal1.evaluator import worker_main
from cudal1.evaluator.sandbox import SHARED_UMASK, set_affinity, spare_cores

# Imported once here, after the worker module (which takes torch.manual_seed before torch._dynamo wraps it):
# most of torch.compile's start in each compiling worker (on the CPU machine a cached compile went from
# 3.5 s to 2.3 s in a fresh process). Not torch._inductor.compile_fx nor torch.utils.cpp_extension: on a
# GPU host their imports call torch.cuda.is_available(), which starts the driver's threads and marks
# every later fork as unable to use CUDA (measured on the H100 host: every worker failed to start).
# main() checks that the server can still fork safely after these imports.
_WARM = ("torch._dynamo", "torch._inductor.codecache", "triton")


# How long the server waits for a request before it makes the warm imports: a batch asks for its first
# workers (a reference, the candidates ahead) within milliseconds of each other.
IDLE_BEFORE_WARM_S = 0.3

_SERVER_PATHS: dict[str, str] = {}  # the server's own cache paths, as the warm modules saw them
_WARMED: list[str] = []  # the modules the warm imports brought in: the only ones own_caches reads


def _cache_paths() -> dict[str, str]:
    """Inductor's cache directories as its cache_dir() resolves them, without creating any."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    default = default_cache_dir()
    return {"default": default, "cache": os.path.abspath(os.environ.get("TORCHINDUCTOR_CACHE_DIR") or default),
            "tmp": tempfile.gettempdir()}


def warm() -> None:
    """Import the modules of ``_WARM`` (what is missing is skipped) and note the cache paths they fixed."""
    before = set(sys.modules)
    for name in _WARM:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - e.g. no Triton on a CPU machine: the worker imports what it needs
            pass
    _SERVER_PATHS.update(_cache_paths())
    _WARMED[:] = [name for name in sys.modules if name not in before and name.startswith("torch")]


def threads() -> int:
    """The process's threads, native ones included (torch's OpenMP pool, a driver's)."""
    return len(os.listdir("/proc/self/task"))


def fork_unsafe(threads_before: int) -> str | None:
    """Why a child forked from this process now could not be a worker, or None: CUDA initialised or
    probed (torch marks the forks of a process that counted the devices, see ``_WARM``), or threads
    started since ``threads_before`` was counted (a driver's, a Python one), which a fork leaves behind
    half-way. (``import torch`` may start an OpenMP pool; workers were always forked beside it.)"""
    if torch.cuda.is_initialized() or getattr(torch.cuda, "_cached_device_count", None) is not None:
        return "CUDA was initialised"
    started = threads() - threads_before
    if started > 0:
        return f"{started} threads started"
    pid = os.fork()
    if pid == 0:
        os._exit(1 if getattr(torch.cuda, "_is_in_bad_fork", lambda: True)() else 0)  # unknown: unsafe
    if os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) != 0:
        return "CUDA was probed: a forked child cannot use it"
    return None


def own_caches() -> list[str]:
    """In a child, after its environment is set: the paths the warm modules fixed at import from the
    server's environment (inductor's header and profile directories, dynamo's package cache) made the
    worker's own, as a worker started afresh has them. Left shared, they would be a channel between
    candidates. Returns what it moved; tests/test_zygote_caches.py finds any such path a new torch adds."""
    if not _SERVER_PATHS:
        return []
    mine = _cache_paths()
    # The longest first: the default cache directory lies inside the temporary one.
    moves = sorted(((old, mine[k]) for k, old in _SERVER_PATHS.items() if old != mine[k]), key=lambda m: -len(m[0]))
    package = sys.modules.get("torch._dynamo.package")
    cache = vars(package).get("DynamoCache") if package is not None else None
    fresh = type(cache)(os.path.join(mine["cache"], "dynamo")) if cache is not None else None
    moved = []
    # Only the warm imports' modules: torch's own import fixes no such path (the test reads every module),
    # and this runs in every forked worker.
    for name in _WARMED:
        module = sys.modules.get(name)
        if module is None:
            continue
        # The module's own dictionary: no module __getattr__ or __setattr__ runs (config modules have both).
        namespace = vars(module)
        for attr, value in list(namespace.items()):
            if value is cache and cache is not None:  # modules that imported the object by name hold it too
                namespace[attr] = fresh
                moved.append(f"{name}.{attr}")
            elif type(value) is str and not attr.startswith("__"):  # not a module's own __file__, __cached__
                # type(), not isinstance: a deprecated stand-in (torch.distributed.reduce_op) warns
                for old, new in moves:
                    if value == old or value.startswith(old + os.sep):
                        namespace[attr] = new + value[len(old):]
                        moved.append(f"{name}.{attr}")
                        break
    return moved


def _close_other_fds(keep: set[int]) -> None:
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass  # the listing's own descriptor, already closed


def _child(request: dict[str, Any], fds: list[int]) -> None:
    """In the forked child: become the sandboxed worker, then run it. Never returns."""
    code = 70
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.setsid()
        log_fd = fds[0]
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        _close_other_fds({0, 1, 2, *fds[1:]})
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        tempfile.tempdir = None  # TMPDIR is the worker's own directory: re-read it
        if request.get("nice"):
            os.setpriority(os.PRIO_PROCESS, 0, request["nice"])  # before the worker reads it (sandbox.timed_core)
        uid = request.get("uid")
        if uid is not None:
            groups = [int(g) for g in request.get("groups") or []]
            os.setgroups(groups)  # its candidate's build folder's group alone (sandbox.py)
            if groups:
                os.umask(SHARED_UMASK)
            os.setgid(uid)
            os.setuid(uid)
        own_caches()  # as the worker: gettempdir() tries a file in its TMPDIR
        argv = [a.format(*fds[1:]) for a in request["argv"]]  # "{0}": the first descriptor after the log
        sys.argv = ["cudal1.evaluator.worker_main", *argv]
        worker_main.main(argv)  # ends with os._exit(0)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - whatever failed, the child must not return into the server
        import traceback

        traceback.print_exc()
    os._exit(code)


def _tell(sock: socket.socket, answer: dict[str, object]) -> bool:
    """Send the parent one answer; False once the parent is gone (killed at a time limit, say), so the
    server ends quietly instead of with a traceback in the run's log."""
    try:
        sock.send(json.dumps(answer).encode())
    except (BrokenPipeError, ConnectionResetError):
        return False
    return True


def _reap(sock: socket.socket) -> bool:
    """Report each worker that ended; False once the parent is gone."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return True
        if pid == 0:
            return True
        code = os.waitstatus_to_exitcode(status)  # -N when killed by signal N, as Popen reports it
        if not _tell(sock, {"exit": pid, "code": code}):
            return False


def warm_aside() -> str | None:
    """The warm imports, in a pause of a serving server or before a torch.compile program's worker: on the
    spare cores where there are some (a device may be timing on its own core by then), the server's cores
    as before afterwards, for the children it forks next. Returns why it can no longer fork
    (:func:`fork_unsafe`), or None."""
    cores = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    # Counted just before: a thread of torch's own start that ended since would hide one they started.
    before = threads()
    set_affinity(spare_cores())
    warm()
    set_affinity(cores)
    return fork_unsafe(before)


def _warm_or_say() -> str | None:
    """:func:`warm_aside`, saying on stderr when the server can no longer fork after it."""
    unsafe = warm_aside()
    if unsafe:
        print(f"cudal1.evaluator.zygote: cannot fork workers after the warm imports: {unsafe}", file=sys.stderr)
    return unsafe


def serve(sock: socket.socket, when: str = "idle") -> None:
    """Fork a worker for each request until the parent closes its end. The warm imports come at the first
    pause after the first request (``when="idle"``; a server started ahead of its batch would otherwise
    make them before the batch's first workers), or before forking the first request marked ``compile``
    (``when="asked"``); if they leave the server unable to fork safely (a torch that starts threads or
    probes CUDA on import), each later request is answered with no pid and the parent starts that worker
    afresh."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so the wakeup descriptor is written
    unsafe = None
    warmed = False
    served = False  # a server started ahead of its first request (process.prestart_fork_server) waits for it
    pause = IDLE_BEFORE_WARM_S if when == "idle" else None
    while True:
        ready, _, _ = select.select([sock, wake_r], [], [], None if warmed or not served else pause)
        if not ready:  # a pause before anything was asked: the warm imports now
            warmed, unsafe = True, _warm_or_say()
            continue
        if wake_r in ready:
            os.read(wake_r, 4096)
        if not _reap(sock):
            return
        if sock not in ready:
            continue
        try:
            message, fds, _flags, _addr = socket.recv_fds(sock, 1 << 20, 16)
        except ConnectionResetError:  # the parent died with answers unread (e.g. killed at a time limit)
            return
        if not message:
            return  # the parent closed its end
        request = json.loads(message)
        served = True
        if when == "asked" and request.get("compile") and not warmed:
            warmed, unsafe = True, _warm_or_say()
        pid = None if unsafe else os.fork()
        if pid == 0:
            sock.close()
            os.close(wake_r)
            os.close(wake_w)
            _child(request, fds)
        for fd in fds:
            os.close(fd)
        if not _tell(sock, {"id": request["id"], "pid": pid, "warm": warmed}):
            return


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sock-fd", type=int, required=True)
    parser.add_argument("--warm", choices=("idle", "asked"), default="asked",
                        help="make the warm imports at the first pause, or before the first torch.compile "
                             "program's worker")
    args = parser.parse_args()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    unsafe = fork_unsafe(threads())
    if unsafe:  # the parent then starts each worker afresh
        sys.exit(f"cudal1.evaluator.zygote: cannot fork workers: {unsafe}")
    serve(socket.socket(fileno=args.sock_fd), args.warm)
    os._exit(0)


if __name__ == "__main__":
    main()
