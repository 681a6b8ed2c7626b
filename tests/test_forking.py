"""Workers forked by the fork server (cudal1/evaluator/zygote.py) are what a fresh `python -m
cudal1.evaluator.worker_main` would be: sandboxed uid without groups, own session, only their own descriptors,
their own environment; exit codes reach the parent; without the server the evaluator starts them as before."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from cudal1.evaluator import forking
from cudal1.evaluator.process import WorkerProcess, WorkerSpec
from cudal1.evaluator.sandbox import sandbox_available
from cudal1.evaluator.workers import scratch_root
from tests import servers


@pytest.fixture
def tmp_path() -> Iterator[Path]:  # noqa: F811 - a directory a sandboxed uid may traverse, as the evaluator makes them
    yield from servers.reachable("cudal1-forking-", parent=scratch_root())


def _status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {k: v.strip() for k, _, v in (line.partition(":") for line in lines)}


def test_a_forked_worker_is_isolated_like_a_started_one(tmp_path: Path) -> None:
    with WorkerProcess(WorkerSpec(device="cpu", memory_limit_mb=4096), tmp_path / "w", "candidate") as worker:
        worker.wait_ready(120)
        assert isinstance(worker.proc, forking.ForkedProcess)
        stat = Path(f"/proc/{worker.pid}/stat").read_text().rsplit(")", 1)[1].split()
        ppid, session = int(stat[1]), int(stat[3])
        assert session == worker.pid and ppid != os.getpid()  # its own session; the server's child
        status = _status(worker.pid)
        if sandbox_available():
            uid = int(status["Uid"].split()[0])
            assert uid == worker.uid and uid != os.getuid() and status["Groups"] == ""
            assert int(status["Gid"].split()[0]) == uid
        assert os.readlink(f"/proc/{worker.pid}/cwd") == str(worker.workdir)
        fds = {int(fd) for fd in os.listdir(f"/proc/{worker.pid}/fd")}
        assert len(fds) <= 6, fds  # 0-2, /dev/null, its command and reply pipes
        assert os.readlink(f"/proc/{worker.pid}/fd/0") == "/dev/null"
        assert os.readlink(f"/proc/{worker.pid}/fd/1") == str(worker.log_path)
        reply = worker.call({"cmd": "probe", "out_path": str(worker.workdir / "probe.pt")}, 60)
        assert reply["ok"]


def test_exit_codes_reach_the_parent(tmp_path: Path) -> None:
    worker = WorkerProcess(WorkerSpec(device="cpu", memory_limit_mb=4096), tmp_path / "w", "candidate")
    worker.wait_ready(120)
    os.kill(worker.pid, signal.SIGKILL)
    assert worker.proc.wait(timeout=10) == -signal.SIGKILL
    worker.close()


def test_without_the_server_workers_start_as_before(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDAL1_FORK_WORKERS", "0")
    with WorkerProcess(WorkerSpec(device="cpu", memory_limit_mb=4096), tmp_path / "w", "candidate") as worker:
        worker.wait_ready(120)
        assert isinstance(worker.proc, subprocess.Popen)


def test_a_dead_server_is_replaced(tmp_path: Path) -> None:
    with WorkerProcess(WorkerSpec(device="cpu", memory_limit_mb=4096), tmp_path / "a", "candidate") as first:
        first.wait_ready(120)
        assert isinstance(first.proc, forking.ForkedProcess)
        server = first.proc.server
    server.proc.kill()
    server.proc.wait(timeout=10)
    with WorkerProcess(WorkerSpec(device="cpu", memory_limit_mb=4096), tmp_path / "b", "candidate") as second:
        second.wait_ready(120)
        assert second.call({"cmd": "probe", "out_path": str(second.workdir / "probe.pt")}, 60)["ok"]


def test_threads_starting_workers_at_once_probe_the_transport_once(monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path) -> None:
    """A batch starts its first workers from several threads; on a fresh GPU machine two first probes of
    the descriptor transport wrote the same temporary file, and the second rename stopped the batch (an
    H100, 2026-11-27). The probe itself needs a GPU; here it is a slow stand-in, the rest is real."""
    import functools
    import threading
    import time

    from cudal1.evaluator import workers

    probes: list[str] = []

    def slow_probe(device: str) -> bool:
        probes.append(device)
        time.sleep(0.2)
        return True

    monkeypatch.setattr(workers.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(workers, "_probe_cache", lambda device: tmp_path / "probe.txt")
    monkeypatch.setattr(workers, "_probe_fd_transport", slow_probe)
    monkeypatch.setattr(workers, "_fd_transport_works", functools.cache(workers._fd_transport_works.__wrapped__))
    barrier = threading.Barrier(6)
    answers: list[bool] = []

    def start() -> None:
        barrier.wait()
        answers.append(workers.fd_transport_works("cuda:0"))

    threads = [threading.Thread(target=start) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert answers == [True] * 6 and probes == ["cuda:0"]
    assert (tmp_path / "probe.txt").read_text() == "1" and [p.name for p in tmp_path.iterdir()] == ["probe.txt"]


def test_a_server_started_ahead_is_the_one_workers_are_forked_from(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """`cudal1 evaluate-one` starts the fork server before it imports the evaluator (process.
    prestart_fork_server): the workers must then come from that server, not from one of their own, even
    though the batch fixes TORCH_CUDA_ARCH_LIST in between (builds.pin_cuda_arch on a GPU host)."""
    from cudal1.evaluator.process import prestart_fork_server

    monkeypatch.setattr(forking, "_SERVERS", {})
    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST", raising=False)
    prestart_fork_server(1)
    [ahead] = [s for s in forking._SERVERS.values() if s is not None]
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0")
    with WorkerProcess(WorkerSpec(device="cpu", threads=1, memory_limit_mb=4096), tmp_path / "w", "candidate") as worker:
        worker.wait_ready(120)
        assert isinstance(worker.proc, forking.ForkedProcess) and worker.proc.server is ahead
        assert len(forking._SERVERS) == 1  # the worker's TORCH_CUDA_ARCH_LIST is set after the fork
    ahead.close()


def test_a_server_started_ahead_makes_its_warm_imports_after_its_first_fork() -> None:
    """With `--warm idle` (a GPU's host) the warm imports come at the first pause: for a server started
    ahead of its batch, the pause before the first request must not count, or the batch's first workers
    would wait for seconds of imports only torch.compile programs use."""
    import json
    import socket
    import sys
    import time

    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    proc = subprocess.Popen([sys.executable, "-m", "cudal1.evaluator.zygote", "--sock-fd", str(child.fileno()),
                             "--warm", "idle"], pass_fds=[child.fileno()], stdin=subprocess.DEVNULL,
                            env=os.environ | {"PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    child.close()
    try:
        time.sleep(4)  # torch imported, then idle well past IDLE_BEFORE_WARM_S with nothing asked
        argv = ["-c", "pass"]
        r, w = os.pipe()
        socket.send_fds(parent, [json.dumps({"id": 1, "argv": argv, "cwd": "/", "env": {}, "uid": None}).encode()],
                        [w])
        parent.settimeout(60)
        answer = json.loads(parent.recv(1 << 16))
        while "exit" in answer:
            answer = json.loads(parent.recv(1 << 16))
        assert answer["id"] == 1 and answer["pid"] and answer["warm"] is False
        os.close(r)
        os.close(w)
    finally:
        parent.close()
        proc.wait(timeout=30)


def test_a_server_whose_parent_dies_with_answers_unread_ends_quietly() -> None:
    """A run killed at its time limit leaves the server's answers unread; the server's next read is then
    reset, and it used to end with a ConnectionResetError traceback in the run's log. It ends quietly."""
    import json
    import socket
    import sys
    import time

    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    proc = subprocess.Popen([sys.executable, "-m", "cudal1.evaluator.zygote", "--sock-fd", str(child.fileno()),
                             "--warm", "idle"], pass_fds=[child.fileno()], stdin=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True,
                            env=os.environ | {"PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    child.close()
    r, w = os.pipe()
    socket.send_fds(parent, [json.dumps({"id": 1, "argv": ["-c", "pass"], "cwd": "/", "env": {}, "uid": None}).encode()],
                    [w])
    parent.settimeout(60)
    assert json.loads(parent.recv(1 << 16, socket.MSG_PEEK))["id"] == 1  # answered, and left unread
    time.sleep(1.0)  # the worker's exit is reported too, and left unread
    parent.close()
    os.close(r)
    os.close(w)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "Traceback" not in err, err


def test_a_torch_compile_programs_worker_asks_its_server_for_the_warm_imports(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """On a machine of a few cores the server makes them only for such a worker (zygote.py, ``--warm asked``)."""
    from ext_helpers import FAST, fixture_problem

    from cudal1.candidates import Candidate
    from cudal1.evaluator.workers import prepare_candidate_worker

    asked: list[bool] = []  # what each request to the server said
    fork = forking.ForkServer.fork
    monkeypatch.setattr(forking.ForkServer, "fork",
                        lambda server, request, fds, **kw: asked.append(request["compile"]) or fork(server, request, fds, **kw))
    problem = fixture_problem("scale_shift")
    plain = "import torch.nn as nn\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n"
    compiled = plain.replace("return x", "return torch.compile(lambda y: y)(x)")
    dynamo = "import torch._dynamo\n" + plain  # what the worker's own load counts as compiling (probes.py)
    for source in (plain, compiled, dynamo):
        with prepare_candidate_worker(problem, Candidate("p", source), FAST, tmp_path) as worker:
            worker.wait_ready(120)
    assert asked == [False, True, True]
