"""A fork server for evaluator workers: one process imports torch and the worker module once, then forks
a fresh worker for each request, so a worker is ready in milliseconds instead of paying the interpreter
and ``import torch`` (1.5 s on a 2-core CPU machine, 1.6-3.5 s on the GPU hosts) every time.

Started by :mod:`cudal1.evaluator.process` as ``python -m cudal1.evaluator.zygote --sock-fd N`` with the
environment that must be in place before torch loads (threads, malloc thresholds, PYTHONPATH). It never
runs untrusted code and never touches a GPU: CUDA is initialised by each child, after the fork. A child
becomes exactly what ``python -m cudal1.evaluator.worker`` under ``subprocess.Popen`` would be: its own
session, stdin /dev/null, stdout and stderr to its log, only the descriptors it was given, its
directory, its environment and (as root) a fresh uid with no groups, set before any of its code runs.

Protocol, over a SOCK_SEQPACKET pair: the parent sends a JSON request (id, argv, cwd, env, uid) with
the worker's descriptors attached; the server answers ``{"id", "pid"}``, and ``{"exit": pid, "code"}``
when it reaps a child (the parent is not the child's parent and cannot wait for it itself). The server
exits when the parent's end closes.

Imports torch and the standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import socket
import sys
import tempfile
from typing import Any

import torch  # noqa: F401 - the point: every child starts with torch imported

from cudal1.evaluator import worker


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
            os.setpriority(os.PRIO_PROCESS, 0, request["nice"])  # before the worker reads it (_pin_cpu)
        uid = request.get("uid")
        if uid is not None:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
        argv = [a.format(*fds[1:]) for a in request["argv"]]  # "{0}": the first descriptor after the log
        sys.argv = ["cudal1.evaluator.worker", *argv]
        worker.main(argv)  # ends with os._exit(0)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - whatever failed, the child must not return into the server
        import traceback

        traceback.print_exc()
    os._exit(code)


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        code = os.waitstatus_to_exitcode(status)  # -N when killed by signal N, as Popen reports it
        sock.send(json.dumps({"exit": pid, "code": code}).encode())


def serve(sock: socket.socket) -> None:
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so the wakeup descriptor is written
    while True:
        ready, _, _ = select.select([sock, wake_r], [], [])
        if wake_r in ready:
            os.read(wake_r, 4096)
        _reap(sock)
        if sock not in ready:
            continue
        message, fds, _flags, _addr = socket.recv_fds(sock, 1 << 20, 16)
        if not message:
            return  # the parent closed its end
        request = json.loads(message)
        pid = os.fork()
        if pid == 0:
            sock.close()
            os.close(wake_r)
            os.close(wake_w)
            _child(request, fds)
        for fd in fds:
            os.close(fd)
        sock.send(json.dumps({"id": request["id"], "pid": pid}).encode())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sock-fd", type=int, required=True)
    args = parser.parse_args()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    if torch.cuda.is_initialized():  # CUDA does not survive a fork: the parent starts workers itself
        sys.exit("cudal1.evaluator.zygote: CUDA was initialised before any fork")
    serve(socket.socket(fileno=args.sock_fd))
    os._exit(0)


if __name__ == "__main__":
    main()
