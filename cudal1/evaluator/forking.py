"""The parent's side of the worker fork server (:mod:`cudal1.evaluator.zygote`): one server per start-up
environment (what torch reads when it loads: threads, malloc thresholds, paths), started on first use
and kept for the life of the process; :func:`fork_worker` asks it for a worker and returns an object
that answers like ``subprocess.Popen`` (``pid``, ``poll``, ``wait``). Returns None when no server can
be had, and the caller starts the worker with ``subprocess.Popen`` as before.

Off with ``CUDAL1_FORK_WORKERS=0``.
"""

from __future__ import annotations

import atexit
import itertools
import json
import os
import socket
import subprocess
import sys
import threading
import time
from typing import Any

from cudal1.evaluator.sandbox import spare_cores

_SERVERS: dict[tuple[tuple[str, str], ...], ForkServer | None] = {}
_LOCK = threading.Lock()
_IDS = itertools.count()


def enabled() -> bool:
    return os.environ.get("CUDAL1_FORK_WORKERS", "1") != "0" and hasattr(socket, "send_fds")


class ForkServer:
    """One zygote process and the thread that reads its answers (pids, and exit codes of reaped workers)."""

    def __init__(self, env: dict[str, str]) -> None:
        self.sock, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # Where there are cores no device times on (a GPU's host), the server forks the first workers
        # before its warm imports and makes them there at its first pause; on a machine of a few cores
        # they would share the cores a CPU device times on, so they come only for a worker that needs
        # them (a torch.compile program's), which would otherwise make them itself at the same moment.
        when = "idle" if spare_cores() is not None else "asked"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cudal1.evaluator.zygote", "--sock-fd", str(child.fileno()), "--warm", when],
            stdin=subprocess.DEVNULL, env=env, pass_fds=[child.fileno()], start_new_session=True)
        child.close()
        self.lock = threading.Lock()  # one request at a time on the socket
        self.changed = threading.Condition()
        self.pids: dict[int, int] = {}  # request id -> pid
        self.codes: dict[int, int] = {}  # pid -> exit code
        self.alive = True
        threading.Thread(target=self._read, name="cudal1-fork-server", daemon=True).start()

    def _read(self) -> None:
        while True:
            try:
                message = self.sock.recv(1 << 16)
            except OSError:
                message = b""
            with self.changed:
                if not message:
                    self.alive = False
                    self.changed.notify_all()
                    return
                answer = json.loads(message)
                if "exit" in answer:
                    self.codes[answer["exit"]] = answer["code"]
                else:
                    self.pids[answer["id"]] = answer["pid"]
                self.changed.notify_all()

    def fork(self, request: dict[str, Any], fds: list[int], timeout_s: float = 60.0) -> int | None:
        """The new worker's pid, or None when the server did not answer (it is then retired)."""
        rid = next(_IDS)
        try:
            with self.lock:
                socket.send_fds(self.sock, [json.dumps(request | {"id": rid}).encode()], fds)
        except OSError:
            self.alive = False
            return None
        with self.changed:
            self.changed.wait_for(lambda: rid in self.pids or not self.alive, timeout=timeout_s)
            return self.pids.pop(rid, None)

    def close(self) -> None:
        self.alive = False
        try:
            # shutdown, not close alone: the reader thread's pending recv keeps a closed socket open, and
            # the server would wait for an end of file that never comes (5 s at every exit, measured)
            self.sock.shutdown(socket.SHUT_RDWR)  # the server exits on end of file
            self.sock.close()  # its workers are the evaluator's to kill
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()


class ForkedProcess:
    """A worker forked by a server, answering like ``subprocess.Popen`` for what the evaluator asks of it."""

    def __init__(self, server: ForkServer, pid: int) -> None:
        self.server, self.pid = server, pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            with self.server.changed:
                self.returncode = self.server.codes.pop(self.pid, None)
            if self.returncode is None and not self.server.alive and not os.path.exists(f"/proc/{self.pid}"):
                self.returncode = -9  # the server is gone and so is the worker: its code is lost
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired("cudal1.evaluator.worker_main", timeout or 0)
            with self.server.changed:
                self.server.changed.wait(timeout=0.05 if left is None else min(left, 0.05))
        assert self.returncode is not None
        return self.returncode


def _server(env: dict[str, str]) -> ForkServer | None:
    key = tuple(sorted(env.items()))
    with _LOCK:
        server = _SERVERS.get(key)
        if server is not None and not server.alive:
            server = None
        if server is None:
            try:
                server = ForkServer(env)
            except OSError:
                server = None
            _SERVERS[key] = server
        return server


def start_fork_server(start_env: dict[str, str]) -> None:
    """Start the server of ``start_env`` now, if it is not running, so its start is over when the first
    worker is asked for (process.prestart_fork_server)."""
    if enabled():
        _server(start_env)


def fork_worker(start_env: dict[str, str], env: dict[str, str], argv: list[str], cwd: str, uid: int | None,
                fds: list[int], nice: int = 0, groups: list[int] | None = None,
                compiles: bool = False) -> ForkedProcess | None:
    """Fork a worker from the server of ``start_env``: ``fds`` = [log, then the descriptors ``argv``
    names as {0}, {1}, ...]; ``env`` is the worker's whole environment; with ``uid``, ``groups`` are its
    only groups besides its own (sandbox.py), and it makes files group-writable; ``compiles``: a
    torch.compile program's worker (zygote.py's ``--warm asked``). None: start it another way."""
    if not enabled():
        return None
    server = _server(start_env)
    if server is None:
        return None
    pid = server.fork({"argv": argv, "cwd": cwd, "env": env, "uid": uid, "nice": nice, "groups": groups or [],
                       "compile": compiles}, fds)
    if pid is None:
        return None
    return ForkedProcess(server, pid)


@atexit.register
def _close_all() -> None:
    for server in _SERVERS.values():
        if server is not None:
            server.close()
