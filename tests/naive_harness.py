"""A deliberately naive evaluation harness: the yardstick the adversarial fixtures are measured against.

It does what many early kernel-search harnesses did, all in ONE process:

- execs the reference and then the candidate into one namespace, like a single concatenated program
  (so a candidate can redefine module globals such as ``batch_size`` and ``get_inputs``);
- seeds with the well-known 42 before building both models and before ``get_inputs()``;
- runs the reference and the candidate once on the same input tensors and keeps the reference's result
  as a host copy (``.to("cpu", copy=True)``, as one does to compare a CUDA result on the host);
- compares with ``torch.allclose(atol=rtol=1e-2)`` and a shape check;
- times both around a few calls on the same inputs: ``time.perf_counter`` on CPU (no join), CUDA events
  on the current stream on a GPU (no device-wide sync).

A hack fixture marked ``passes_naive`` must get ``correct=True`` from this harness (and, where the
hack is about speed, a large ``speedup``): that is what makes its test against the real evaluator
meaningful. Never use this for anything but tests.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any

import torch

NAIVE_SEED = 42
NAIVE_TOLERANCE = 1e-2


@dataclass(frozen=True)
class NaiveResult:
    correct: bool
    speedup: float  # reference_ms / candidate_ms as the naive timer saw it
    reason: str = ""


def _host_copy(out: Any) -> Any:
    if isinstance(out, torch.Tensor):
        return out.detach().to("cpu", copy=True)
    if isinstance(out, (list, tuple)):
        return type(out)(_host_copy(o) for o in out)
    return out


def _naive_time_ms(model: Any, inputs: list[Any], iters: int) -> float:
    """CPU: ``time.perf_counter`` looked up on every call (a patched timer is believed). CUDA: events on
    the current stream and a wait on the end event only, as CUDA-L1's released harness and KernelBench
    do (work left on another stream escapes)."""
    cuda = any(isinstance(x, torch.Tensor) and x.is_cuda for x in inputs)
    with torch.no_grad():
        model(*inputs)  # warm-up
        if cuda:
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                model(*inputs)
            end.record()
            end.synchronize()
            elapsed = start.elapsed_time(end)
            torch.cuda.synchronize()  # before the next measurement, not inside this one
            return elapsed / iters
        start_s = time.perf_counter()
        for _ in range(iters):
            model(*inputs)
        return (time.perf_counter() - start_s) * 1e3 / iters


def naive_harness(
    problem_src: str,
    candidate_src: str,
    *,
    candidate_first: bool = False,
    device: str = "cpu",
    timing_iters: int = 5,
) -> NaiveResult:
    """Run ``candidate_src`` against ``problem_src`` the naive way; see the module docstring.

    ``candidate_first`` runs the candidate before the reference (on the same input tensors), as a
    harness that randomises the order sometimes does.
    """
    torch.set_num_threads(1)  # one core for both sides, as the real evaluator does on CPU
    namespace: dict[str, Any] = {"__name__": "naive_program"}
    exec(compile(problem_src, "<reference>", "exec"), namespace)  # noqa: S102 - a test harness
    exec(compile(candidate_src, "<candidate>", "exec"), namespace)  # noqa: S102
    if "ModelNew" not in namespace:
        return NaiveResult(False, 0.0, "no ModelNew")
    torch.manual_seed(NAIVE_SEED)
    init_inputs = namespace["get_init_inputs"]()
    torch.manual_seed(NAIVE_SEED)
    reference = namespace["Model"](*init_inputs).to(device)
    torch.manual_seed(NAIVE_SEED)
    candidate = namespace["ModelNew"](*init_inputs).to(device)
    torch.manual_seed(NAIVE_SEED)
    inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in namespace["get_inputs"]()]
    with torch.no_grad():
        if candidate_first:
            out = candidate(*inputs)
            expected = _host_copy(reference(*inputs))
        else:
            expected = _host_copy(reference(*inputs))
            out = candidate(*inputs)
    if device != "cpu":
        torch.cuda.synchronize()
    if not isinstance(out, torch.Tensor) or out.shape != expected.shape:
        return NaiveResult(False, 0.0, f"shape {getattr(out, 'shape', type(out))} != {tuple(expected.shape)}")
    out = out.to("cpu")
    if not torch.allclose(out, expected, atol=NAIVE_TOLERANCE, rtol=NAIVE_TOLERANCE):
        return NaiveResult(False, 0.0, "values differ")
    reference_ms = _naive_time_ms(reference, inputs, timing_iters)
    candidate_ms = _naive_time_ms(candidate, inputs, timing_iters)
    return NaiveResult(True, reference_ms / max(candidate_ms, 1e-9))


def _fork_and_run(problem_src: str, candidate_src: str, timeout_s: float, kwargs: dict[str, Any]) -> NaiveResult:
    """Fork this process, run ``naive_harness`` in the child, read one JSON line from a private pipe."""
    import json
    import os
    import select
    import signal

    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: run, report one JSON line, leave without teardown
        os.close(read_fd)
        try:
            result = naive_harness(problem_src, candidate_src, **kwargs)
            payload = {"correct": result.correct, "speedup": result.speedup, "reason": result.reason}
        except BaseException as exc:  # noqa: BLE001 - any failure is a "not passed"
            payload = {"correct": False, "speedup": 0.0, "reason": f"{type(exc).__name__}: {exc}"}
        os.write(write_fd, (json.dumps(payload) + "\n").encode())
        os._exit(0)
    os.close(write_fd)
    data = b""
    try:
        while not data.endswith(b"\n"):  # one line: a forked grandchild may hold the pipe open
            ready, _, _ = select.select([read_fd], [], [], timeout_s)
            if not ready:
                os.kill(pid, signal.SIGKILL)
                return NaiveResult(False, 0.0, f"timed out after {timeout_s} s")
            chunk = os.read(read_fd, 65536)
            if not chunk:
                break
            data += chunk
    finally:
        os.close(read_fd)
        os.waitpid(pid, 0)
    if not data.strip():
        return NaiveResult(False, 0.0, "the harness process died without a result")
    row = json.loads(data)
    return NaiveResult(bool(row["correct"]), float(row["speedup"]), str(row["reason"]))


_SERVER: Any = None


def naive_harness_isolated(problem_src: str, candidate_src: str, *, timeout_s: float = 60.0, **kwargs: Any) -> NaiveResult:
    """``naive_harness`` in a throw-away process, so a candidate's patches, threads and crashes stay there.

    The process is forked from a helper interpreter started once per test session, which imported torch
    but never ran a parallel region: forking the test process itself would hang any candidate that uses
    OpenMP threads (libgomp is not fork-safe once its pool exists). CPU only; GPU tests start a fresh
    interpreter per run.
    """
    import atexit
    import json
    import subprocess

    global _SERVER
    if _SERVER is None or _SERVER.poll() is not None:
        _SERVER = subprocess.Popen([sys.executable, __file__, "--serve"], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, text=True)
        atexit.register(_SERVER.kill)
    request = {"problem": problem_src, "candidate": candidate_src, "timeout_s": timeout_s, "kwargs": kwargs}
    _SERVER.stdin.write(json.dumps(request) + "\n")
    _SERVER.stdin.flush()
    line = _SERVER.stdout.readline()
    if not line:
        _SERVER = None
        return NaiveResult(False, 0.0, "the naive harness server died")
    row = json.loads(line)
    return NaiveResult(bool(row["correct"]), float(row["speedup"]), str(row["reason"]))


def _serve() -> None:
    """Read requests (JSON lines) on stdin; answer each from a forked child on stdout."""
    import json
    import os

    torch.set_num_threads(1)
    out = os.fdopen(os.dup(1), "w")  # answers go on a private copy of stdout
    os.dup2(2, 1)  # what a candidate prints goes to stderr, never into an answer
    for line in sys.stdin:
        request = json.loads(line)
        result = _fork_and_run(request["problem"], request["candidate"], request["timeout_s"], request["kwargs"])
        out.write(json.dumps({"correct": result.correct, "speedup": result.speedup, "reason": result.reason}) + "\n")
        out.flush()


if __name__ == "__main__" and "--serve" in sys.argv:
    _serve()
