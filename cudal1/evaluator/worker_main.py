"""The worker process around :class:`cudal1.evaluator.worker.Worker`: resource limits, CPU pinning and
the command loop. Started by :mod:`cudal1.evaluator.process` as ``python -m cudal1.evaluator.worker_main
--cmd-fd N --reply-fd M`` (or forked by :mod:`cudal1.evaluator.zygote`, which calls :func:`main`).
Commands arrive as JSON lines on a private pipe and replies leave on another, so a candidate printing to
stdout cannot forge a reply; fd 0 is /dev/null and fd 1 is redirected to the log.

This module imports torch and the standard library only: it is the GPU evaluation worker.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import traceback
from collections.abc import Callable
from typing import Any, TextIO

import torch

from cudal1.evaluator.probes import warm_kernels
from cudal1.evaluator.sandbox import set_affinity, spare_cores, timed_core
from cudal1.evaluator.worker import Worker


def _limit_resources(memory_limit_mb: int, cuda: bool) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a segfault must not write a core file
    if os.getuid() != 0:  # a fresh sandbox uid: cap its processes and threads (fork bombs)
        resource.setrlimit(resource.RLIMIT_NPROC, (512, 512))
    if memory_limit_mb > 0 and not cuda:  # CUDA reserves a huge virtual address space: no RLIMIT_AS
        limit = memory_limit_mb * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def main(argv: list[str] | None = None) -> None:
    args = _arguments(argv)
    commands = os.fdopen(args.cmd_fd, "r", encoding="utf-8")
    replies = os.fdopen(args.reply_fd, "w", encoding="utf-8", buffering=1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)  # stdout -> the log: printed text can never be read as a reply
    _limit_resources(args.memory_limit_mb, args.device.startswith("cuda"))
    worker = _start(args)
    _serve(worker, commands, replies, json.dumps)
    replies.flush()
    os._exit(0)  # skip interpreter teardown: candidate atexit hooks and destructors get no say


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cmd-fd", type=int, required=True)
    parser.add_argument("--reply-fd", type=int, required=True)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--core", type=int, default=None)
    parser.add_argument("--memory-limit-mb", type=int, default=0)
    parser.add_argument("--no-flush-l2", action="store_true")
    parser.add_argument("--fd-sock", type=int, default=-1)
    parser.add_argument("--warm-compile", action="store_true")
    parser.add_argument("--cores", default="", help="comma-separated cores (a build worker's)")
    return parser.parse_args(argv)


def _start(args: argparse.Namespace) -> Worker:
    """The worker, its CUDA context and harness kernels up, on its timed core (or its build cores): the
    start runs on the spare cores, so a worker started beside another candidate's timing keeps off the
    timed core until it is done."""
    core = timed_core(args.device, args.core)
    if args.cores:  # a build worker on a GPU's host: it and its compilers keep to the spare cores
        set_affinity({int(c) for c in args.cores.split(",")})
    # A GPU worker's start (CUDA context, torch.compile's start) runs on the cores no device times on: a
    # batch starts workers while another candidate is timed, and on its timed core they would share it
    spare = spare_cores() if core is not None and args.device.startswith("cuda") else None
    set_affinity(spare if spare is not None else core)
    fd_sock = socket.socket(fileno=args.fd_sock) if args.fd_sock >= 0 else None
    # spare: where its loads prepare the reference's inputs
    worker = Worker(args.device, args.threads, not args.no_flush_l2, fd_sock, spare_cores=spare)
    if worker.device.type == "cuda":
        torch.zeros(1, device=worker.device)  # bring the CUDA context up before "ready": prestarted
        # workers then hide this cost behind another candidate's timing, and the harness's kernels too
        warm_kernels(worker.device)
    if args.warm_compile:
        # A torch.compile program's worker started ahead: Inductor's start comes before its load, not in it
        try:
            worker.warm_compile()
        except Exception:  # noqa: BLE001 - the load makes it again and reports what fails there
            pass
    set_affinity(core)  # then onto its timed core, before any program code runs
    return worker


def _serve(worker: Worker, commands: TextIO, replies: TextIO, send_json: Callable[[Any], str]) -> None:
    """Answer commands until "exit". Everything the loop calls is bound here, before the first command and so
    before any program code runs: a program cannot swap the loop's own functions for its next reply."""
    answer = _answer
    handlers = {
        # quiet: the device drained of this program's work before the parent stops the process while the
        # reference is timed (trials.py); the loop below drains it, after the reply's integrity checks
        "quiet": lambda msg: {"ok": True},
        "load": worker.load,
        "reference": worker.reference_outputs,
        "run": worker.run,
        "time": worker.time_trial,
        "probe": worker.probe,
        "warm": worker.warm,
        "reset": worker.reset,
    }
    replies.write(send_json({"ok": True, "ready": True, "pid": os.getpid()}) + "\n")
    for line in commands:
        msg = json.loads(line)
        if msg["cmd"] == "exit":
            break
        for block in worker.keep:  # the parent copied the last command's exports before sending this one
            block.release()
        worker.keep = []
        reply, drained = answer(worker, handlers, msg)
        replies.write(send_json(reply) + "\n")
        if drained and msg.get("stop"):
            # The parent stops this process group too once it reads the reply; stopping here first spares a
            # hidden thread the reply's trip to the parent. What it queues on the device after the drain
            # (a thread holding the GIL delays this line) the reference's worker waits out (timed.IdleDevice),
            # and the parent reads its CPU over this command (trials._time_reference)
            os.killpg(0, signal.SIGSTOP)


def _answer(worker: Worker, handlers: dict[str, Callable[[dict[str, Any]], dict[str, Any]]], msg: dict[str, Any]
            ) -> tuple[dict[str, Any], bool]:
    """One command's reply, with the integrity checks' findings and the builds so far; and, for "quiet",
    whether the device was drained after them."""
    try:
        reply = handlers[msg["cmd"]](msg)
    except SyntaxError as exc:
        reply = {"ok": False, "kind": "compile_error", "error": f"SyntaxError: {exc}"}
    except BaseException as exc:  # noqa: BLE001 - every failure of untrusted code becomes a verdict
        reply = _failure(exc)
    reply["violations"] = worker.violations() if worker.guards else {}
    if worker.builds is not None:
        reply["builds"] = worker.builds.summary()
    reply["nonce"] = msg.get("nonce")
    drained = False
    if msg["cmd"] == "quiet":
        # As late as it can be: work a hidden thread queued while the checks above ran is waited for too
        try:
            worker._sync()
            drained = True
        except BaseException as exc:  # noqa: BLE001 - an asynchronous error of the candidate's kernels
            reply |= _failure(exc)
    return reply, drained


def _failure(exc: BaseException) -> dict:
    """The reply for a command that raised: its kind (a build error or a runtime error) and its text."""
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    kind = "compile_error" if _is_build_error(exc) else "runtime_error"
    if isinstance(exc, (MemoryError, torch.OutOfMemoryError)):
        text = f"out of memory: {text}"
    return {"ok": False, "kind": kind, "error": text[-4000:], "traceback": traceback.format_exc()[-4000:]}


def _is_build_error(exc: BaseException) -> bool:
    text = str(exc)
    return "Error building extension" in text or "ninja" in text.lower() and "build" in text.lower()


if __name__ == "__main__":
    main()
