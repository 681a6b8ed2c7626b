"""The fork server forks the first workers a batch asks for before its warm imports (torch.compile's
machinery, which only compiling programs use), and makes those imports at its first pause (a GPU's host),
or on a machine of a few cores just before the first torch.compile program's worker."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cudal1.evaluator import zygote

REPO = Path(__file__).resolve().parents[1]
# Long enough for the server to see its pause and begin its imports even on a loaded machine; a request
# that comes while it imports waits for them, so it is answered warm either way.
PAUSE_S = 15 * zygote.IDLE_BEFORE_WARM_S


def _ask(sock: socket.socket, rid: int, log_fd: int, cwd: Path, compiles: bool = False) -> dict[str, Any]:
    # a worker that exits at once: worker_main rejects the option (argparse, exit code 2)
    request = {"id": rid, "argv": ["--no-such-option"], "cwd": str(cwd), "env": {"PATH": os.environ["PATH"]},
               "uid": None, "compile": compiles}
    socket.send_fds(sock, [json.dumps(request).encode()], [log_fd])
    return _until(sock, lambda a: a.get("id") == rid)


def _until(sock: socket.socket, wanted: Any) -> dict[str, Any]:
    sock.settimeout(120)
    while True:
        answer = json.loads(sock.recv(1 << 16))
        if wanted(answer):
            return answer


@contextmanager
def _serving(tmp_path: Path, argv: list[str], pythonpath: str = str(REPO)) -> Iterator[tuple[socket.socket, int]]:
    """A real fork server started with ``argv`` (its socket's descriptor as ``{fd}``), its end of the pair,
    and a log the workers write to; the server ends when its end closes."""
    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    server = subprocess.Popen([sys.executable, *(a.format(fd=child.fileno()) for a in argv)],
                              pass_fds=[child.fileno()], cwd=REPO, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True, env={**os.environ, "PYTHONPATH": pythonpath})
    child.close()
    log = os.open(tmp_path / "workers.log", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        yield parent, log
    finally:
        os.close(log)
        parent.shutdown(socket.SHUT_RDWR)
        parent.close()
        _, err = server.communicate(timeout=30)
        (tmp_path / "server.log").write_text(err)


def _zygote(when: str) -> list[str]:
    return ["-m", "cudal1.evaluator.zygote", "--sock-fd", "{fd}", "--warm", when]


def test_first_worker_is_forked_before_the_warm_imports_and_later_ones_after(tmp_path: Path) -> None:
    with _serving(tmp_path, _zygote("idle")) as (parent, log):  # a GPU's host
        first = _ask(parent, 0, log, tmp_path)  # sent before the server has even imported torch
        assert first["pid"] and first["warm"] is False
        assert _until(parent, lambda a: a.get("exit") == first["pid"])["code"] == 2
        time.sleep(PAUSE_S)  # a pause: the server makes its warm imports in it
        later = _ask(parent, 1, log, tmp_path)
        assert later["pid"] and later["warm"] is True
        assert _until(parent, lambda a: a.get("exit") == later["pid"])["code"] == 2
    assert "worker_main: error" in (tmp_path / "workers.log").read_text()  # the workers ran, and said why they ended


def test_on_few_cores_the_warm_imports_wait_for_the_first_torch_compile_program(tmp_path: Path) -> None:
    """A pause is no reason there (a CPU device may be timing on the cores); a batch without a torch.compile
    program never pays for the imports, and the first such program's worker is forked after them."""
    with _serving(tmp_path, _zygote("asked")) as (parent, log):
        assert _ask(parent, 0, log, tmp_path)["warm"] is False
        time.sleep(PAUSE_S)
        assert _ask(parent, 1, log, tmp_path)["warm"] is False
        compiling = _ask(parent, 2, log, tmp_path, compiles=True)
        assert compiling["pid"] and compiling["warm"] is True
        assert _ask(parent, 3, log, tmp_path)["warm"] is True  # every later worker too


def test_warm_imports_that_leave_the_server_unsafe_send_later_workers_to_a_fresh_start(tmp_path: Path) -> None:
    """A torch whose compile machinery started a thread on import: the server forks nothing after it, and
    answers with no pid, so the parent starts those workers afresh (forking.fork_worker returns None)."""
    (tmp_path / "starts_a_thread.py").write_text(
        "import threading, time\nthreading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n")
    script = ("import sys\nfrom cudal1.evaluator import zygote\nzygote._WARM = ('starts_a_thread',)\n"
              "sys.argv = ['zygote', '--sock-fd', '{fd}', '--warm', 'idle']\nzygote.main()\n")
    with _serving(tmp_path, ["-c", script], f"{REPO}{os.pathsep}{tmp_path}") as (parent, log):
        assert _ask(parent, 0, log, tmp_path)["pid"]  # before the warm imports: forked
        time.sleep(PAUSE_S)
        later = _ask(parent, 1, log, tmp_path)
        assert later["pid"] is None and later["warm"] is True
    assert "cannot fork workers after the warm imports: 1 threads started" in (tmp_path / "server.log").read_text()
