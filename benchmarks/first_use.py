"""Where a forked GPU worker's first use of the device goes, and what loading the CUDA libraries in the
fork server (before any fork, without initialising CUDA) would save.

A process with torch imported (as the fork server has it) forks children; each child, as a worker does,
initialises CUDA and makes a first convolution (cuDNN) and a first matrix product (cuBLAS), timing each
step. With ``--preload`` the parent first opens cuDNN's sub-libraries with dlopen (torch opens them on
first use), so the children inherit them mapped and relocated. Both variants alternate, fresh children
each round, on the GPU machine:

    PYTHONPATH=. python3 benchmarks/first_use.py --rounds 6 --json OUT/first-use.json
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch


def cudnn_libraries() -> list[str]:
    """cuDNN's shared libraries beside torch (the nvidia-cudnn wheel), the main one last."""
    found: list[str] = []
    for base in sys.path:
        found += glob.glob(os.path.join(base, "nvidia", "cudnn", "lib", "libcudnn*.so*"))
    return sorted(set(found), key=lambda p: ("libcudnn.so" in os.path.basename(p), p))


def child(write_fd: int) -> None:
    steps: dict[str, float] = {}
    t = time.perf_counter()
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    steps["context_s"] = time.perf_counter() - t
    x = torch.randn(8, 64, 56, 56, device="cuda")
    w = torch.randn(64, 64, 3, 3, device="cuda")
    t = time.perf_counter()
    torch.nn.functional.conv2d(x, w, padding=1)
    torch.cuda.synchronize()
    steps["first_conv_s"] = time.perf_counter() - t
    a = torch.randn(1024, 1024, device="cuda")
    t = time.perf_counter()
    a @ a
    torch.cuda.synchronize()
    steps["first_matmul_s"] = time.perf_counter() - t
    t = time.perf_counter()
    torch.nn.functional.conv2d(x, w, padding=1)
    torch.cuda.synchronize()
    steps["second_conv_s"] = time.perf_counter() - t
    os.write(write_fd, json.dumps(steps).encode())


def forked_steps() -> dict[str, float]:
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        try:
            child(write_fd)
        finally:
            os._exit(0)
    os.close(write_fd)
    t = time.perf_counter()
    data = b""
    while chunk := os.read(read_fd, 65536):
        data += chunk
    os.waitpid(pid, 0)
    os.close(read_fd)
    steps = json.loads(data)
    steps["child_s"] = time.perf_counter() - t
    return steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    assert not torch.cuda.is_initialized()
    runs: dict[str, list[dict[str, float]]] = {"plain": [], "preloaded": []}
    forked_steps()  # the libraries' files in the page cache for both variants
    for _ in range(args.rounds):
        runs["plain"].append(forked_steps())
    t = time.perf_counter()
    libraries = cudnn_libraries()
    for path in libraries:
        ctypes.CDLL(path, mode=os.RTLD_GLOBAL)
    preload_s = time.perf_counter() - t
    assert not torch.cuda.is_initialized()
    for _ in range(args.rounds):
        runs["preloaded"].append(forked_steps())
    summary = {name: {k: round(statistics.median(r[k] for r in rows), 4) for k in rows[0]} for name, rows in runs.items()}
    result = {"gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
              "torch": torch.__version__, "libraries": [os.path.basename(p) for p in libraries],
              "preload_s": round(preload_s, 3), "median": summary, "rounds": runs}
    print(json.dumps({k: v for k, v in result.items() if k != "rounds"}, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
