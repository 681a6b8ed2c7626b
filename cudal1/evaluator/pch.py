"""A precompiled ``torch/extension.h`` for the extension builds of a batch.

Every extension torch builds from inline sources compiles a ``main.cpp`` that starts with
``#include <torch/extension.h>``, the whole C++ API: about 20 s of parsing on one core of the CPU host
(docs/evaluator.md, "Precompiled torch header"), a fifth of a CUDA-L1 program's build CPU, paid again by
every build. GCC can load that parse from a precompiled header instead. The batch's parent compiles the
header once, with the flags torch itself gives such a ``main.cpp`` (read from the ``build.ninja`` torch
writes for an empty extension), into ``<extensions root>/.pch/torch/extension.h.gch/``. Every worker's
``CPATH`` names ``<extensions root>/.pch``, so GCC, looking for ``torch/extension.h``, meets the ``.gch``
first and uses it when it is valid for the compile at hand: the same compiler binary, compatible options
and macros, the include on the first line. GCC checks that itself and parses the header as usual
otherwise (a program's ``-O3`` does; a ``.cu`` file, which nvcc preprocesses with its own macros, never
uses it). No build's command line changes, so torch's and ninja's bookkeeping see the same build with or
without it, and the object file is byte for byte the same (tests/test_pch.py).

Only the parent writes there, as root on a GPU host; a sandboxed worker can read it, not change it.
Where the parent is not root, workers share its uid and could replace it, as they could any other
candidate's cache entry: the evaluator's sandbox is what stops both.

Run as a module by the parent: ``python -m cudal1.evaluator.pch <extensions root> [--nice N] [--cores 2,3]``.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SEARCH_DIR = ".pch"
HEADER = Path("torch") / "extension.h"
SCRATCH_LINE = "scratch: "  # the line naming the compile's temporary directory
MIN_BUILDS = 4  # a batch with fewer extension builds does not make up the header's own compile (~40 s)


def search_dir(extensions_root: Path) -> Path:
    """The directory a worker's CPATH names (it holds ``torch/extension.h.gch/`` only)."""
    return extensions_root / SEARCH_DIR


def cpath(extensions_root: Path, current: str | None = None) -> str:
    """A worker's CPATH: the precompiled header's directory first, then whatever the user had.

    >>> cpath(Path("/x"), None), cpath(Path("/x"), "/usr/inc")
    ('/x/.pch', '/x/.pch:/usr/inc')
    """
    return ":".join([str(search_dir(extensions_root)), *([current] if current else [])])


class _Written(Exception):
    pass


def ninja_file(build: Path, **load_inline: Any) -> dict[str, str]:
    """The variables of the ``build.ninja`` torch writes into ``build`` for a ``load_inline`` call with
    these arguments (``cflags``, ``cuda_cflags``, ``cxx``, ...), nothing compiled. Replaces torch's ninja
    runner for the call: not for a process that builds extensions at the same time."""
    import torch.utils.cpp_extension as cpp

    written: dict[str, str] = {}

    def capture(build_directory: str, verbose: bool, error_prefix: str) -> None:
        text = Path(build_directory, "build.ninja").read_text()
        written.update(m.groups() for m in re.finditer(r"^(\w+) = (.*)$", text, re.MULTILINE))
        raise _Written  # torch writes build.ninja, then would run it

    build.mkdir(parents=True, exist_ok=True)
    runner, cpp._run_ninja_build = cpp._run_ninja_build, capture
    try:
        cpp.load_inline(**load_inline, build_directory=str(build))
    except _Written:
        pass
    finally:
        cpp._run_ninja_build = runner
    return written


def header_command() -> list[str] | None:
    """The command that compiles ``torch/extension.h`` the way torch compiles an inline extension's
    ``main.cpp`` (its compiler, ``cflags`` and ``post_cflags``, less the extension's name), less its
    ``-o <output>``; None where the compiler is not GCC (clang reads ``.gch`` files differently)."""
    import torch.utils.cpp_extension as cpp

    with tempfile.TemporaryDirectory() as build:  # the flags of a CUDA build where torch has CUDA
        ninja = ninja_file(Path(build), name="cudal1_pch", cpp_sources="", with_cuda=cpp.CUDA_HOME is not None)
    if "cflags" not in ninja:
        raise RuntimeError("torch wrote no build.ninja with cflags for an empty inline extension")
    cxx = shlex.split(ninja.get("cxx", "c++"))
    probe = subprocess.run([*cxx, "-dM", "-E", "-x", "c++", "/dev/null"], capture_output=True, text=True)
    if "__GNUC__" not in probe.stdout or "__clang__" in probe.stdout:
        return None
    flags = [f for f in shlex.split(ninja["cflags"]) + shlex.split(ninja.get("post_cflags", ""))
             if not f.startswith("-DTORCH_EXTENSION_NAME=")]
    header = Path(cpp.__file__).resolve().parents[1] / "include" / HEADER
    return [*cxx, "-x", "c++-header", *flags, str(header)]


def _key(command: list[str]) -> str:
    """What makes a header stale: the command (compiler, flags, torch's include path), the compiler's
    version, and the header's torch version. GCC itself rejects a header of another compiler binary,
    but not one whose source headers changed under the same path."""
    import torch

    version = subprocess.run([command[0], "--version"], capture_output=True, text=True).stdout
    return hashlib.sha256("\0".join([*command, version, torch.__version__]).encode()).hexdigest()[:16]


def prepare(extensions_root: Path) -> str:
    """Compile the header into the extensions root unless it is there already; returns what happened.
    Written under a temporary name and renamed, so a compile never reads half a file; headers of other
    keys (another compiler or torch) are removed."""
    target = search_dir(extensions_root) / f"{HEADER}.gch"
    scratch = search_dir(extensions_root) / "tmp"
    command = header_command()
    if command is None:
        return "skipped: the C++ compiler is not GCC"
    name = f"{_key(command)}.gch"
    if (target / name).is_file():
        return f"present: {target / name}"
    for path in (target, scratch):
        path.mkdir(parents=True, exist_ok=True)
    for directory in (search_dir(extensions_root), target.parent, target):
        directory.chmod(0o755)  # a sandboxed worker reads and lists it, and cannot write
    with tempfile.TemporaryDirectory(dir=scratch) as tmp:
        # named first, so a parent that stops the compile (builds.prebuild_header) removes what it leaves
        print(f"{SCRATCH_LINE}{tmp}", flush=True)
        out = Path(tmp) / name
        started = time.perf_counter()
        done = subprocess.run([*command, "-o", str(out)], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"compiling {HEADER} failed ({shlex.join(command[:3])} ...): "
                               f"{(done.stderr or done.stdout)[-600:]}")
        out.chmod(0o444)
        os.replace(out, target / name)
    for stale in target.glob("*.gch"):
        if stale.name != name:
            stale.unlink(missing_ok=True)
    return f"compiled in {time.perf_counter() - started:.1f} s: {target / name}"


def main(argv: list[str]) -> None:
    """Compile the precompiled torch header into an extensions root (the batch's parent runs it)."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m cudal1.evaluator.pch", description=main.__doc__)
    ap.add_argument("root", type=Path, help="the extensions root (TORCH_EXTENSIONS_DIR's parent)")
    ap.add_argument("--nice", type=int, default=0, help="CPU priority of the compile")
    ap.add_argument("--cores", default="", help="the cores it may use, e.g. 2,3,4 (default: any)")
    args = ap.parse_args(argv)
    os.nice(args.nice)
    if args.cores:
        os.sched_setaffinity(0, {int(c) for c in args.cores.split(",")})
    print(prepare(args.root), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
