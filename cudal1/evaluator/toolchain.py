"""The toolchain of torch's extension builds as the evaluator sets it up: a ``ninja`` that stops a build at
its first failed compile, ninja's dependency log found damaged and removed, and a precompiled
``torch/extension.h``. Standard library only (torch is imported inside the functions that read its build
flags): the fail-fast ninja runs as its own interpreter (``-I``), importing this module by name.

**Fail-fast ninja.** torch builds an inline extension with ninja: the ``main.cpp`` it writes and the
program's CUDA file, side by side. When one compile fails the build has failed, but ninja lets the
compiles already running go to their end before it says so. Most of CUDA-L1's programs bind a function
their C++ never declares: their ``main.cpp`` fails in seconds, and the CUDA file's compile, most of a
build (one to four minutes on a GPU host), ran on for nothing, on the cores the other builds and the
timing share. The workers' PATH finds :func:`shim_dir`'s ``ninja`` first; it runs the real ninja, passes
its output through unchanged, and stops it (SIGTERM: ninja stops its compiles and reports the build
interrupted) half a second after ninja reports a failed compile, so ninja has printed that compile's
errors. The build fails as it would have, with the same first error, which is what the program catches
and what the evaluator remembers (extensions.py).

**Damaged deps logs.** ninja records each object's header dependencies and time in the build folder's
``.ninja_deps``. Two ninjas writing one folder at once (a killed run's compiles still going when the next
run builds the same program) leave records out of order; ninja then finds the object out of date and
compiles it again, and on ninja 1.13 the log stays damaged, so every load of that program compiles again,
for good, with the device waiting behind it. Removing the damaged log makes the next build compile once
and write it afresh (docs/evaluator.md at 88f971b, "Builds done again").

**Precompiled torch header.** Every inline extension compiles a ``main.cpp`` that starts with
``#include <torch/extension.h>``, the whole C++ API: about 20 s of parsing on one core, a fifth of a
CUDA-L1 program's build CPU, paid again by every build (docs/evaluator.md at 88f971b, "Precompiled torch header").
The batch's parent compiles the header once, with the flags torch itself gives such a ``main.cpp`` (read
from the ``build.ninja`` torch writes for an empty extension), into
``<extensions root>/.pch/torch/extension.h.gch/``. Every worker's ``CPATH`` names ``<extensions
root>/.pch``, so GCC meets the ``.gch`` first and uses it where it is valid for the compile at hand (the
same compiler binary, compatible options and macros, the include on the first line), and parses the
header as usual otherwise. No build's command line changes, and the object file is byte for byte the same
(tests/test_pch.py). Only the parent writes there (as root on a GPU host, where a sandboxed worker can
read it, not change it). Run by the parent as
``python -m cudal1.evaluator.toolchain <extensions root> [--nice N] [--cores 2,3]``.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

# --- the fail-fast ninja

GRACE_S = 0.5  # after "FAILED:", for ninja to print that compile's output before it is stopped


def real_ninja(own_dir: Path, path: str | None = None, beside: Path | None = None) -> str | None:
    """The ninja beside this interpreter (pip's ``ninja``, which the package depends on), else the one PATH
    finds once this script's own directory is left out. The same one whatever the user's PATH: a build log
    written by another ninja version is read as too old (1.13 after 1.11) or its commands as changed (1.11
    after 1.13), and every command of a cached build is done again. The CPU machine has both, /usr/bin's
    and the environment's, so a PATH with the environment's bin and one without rebuilt each other's
    extensions."""
    own = (beside if beside is not None else Path(sys.executable).parent) / "ninja"
    if own.is_file() and os.access(own, os.X_OK) and own.resolve().parent != own_dir:
        return str(own)
    entries = (path if path is not None else os.environ.get("PATH", "")).split(os.pathsep)
    return shutil.which("ninja", path=os.pathsep.join(e for e in entries if e and Path(e).resolve() != own_dir))


def run(argv: list[str]) -> int:
    """``ninja <args>``: the real ninja, stopped shortly after its first failed compile."""
    real = real_ninja(Path(argv[0]).resolve().parent)
    if real is None:
        sys.stderr.write("ninja: not found on PATH (cudal1's fail-fast ninja looks past its own directory)\n")
        return 127
    args = argv[1:]
    if any(a in ("--version", "-t", "-h", "--help") for a in args):  # no build: ninja itself answers
        os.execv(real, [real, *args])
    proc = subprocess.Popen([real, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert proc.stdout is not None
    out = sys.stdout.buffer
    stopping: threading.Timer | None = None
    for line in proc.stdout:
        out.write(line)
        out.flush()
        if stopping is None and line.startswith(b"FAILED: "):
            stopping = threading.Timer(GRACE_S, _stop, (proc,))
            stopping.daemon = True
            stopping.start()
    code = proc.wait()
    if stopping is not None:
        stopping.cancel()
    return code


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)


_SHIM_LOCK = threading.Lock()


def shim_dir() -> Path | None:
    """A directory holding ``ninja`` (this script, run by this interpreter), readable and runnable by a
    sandboxed worker, made once per parent process and removed at its exit. Workers put it first on
    their PATH (process.py). None where it cannot run (a temp dir mounted noexec, no ninja at all):
    the workers then run ninja itself, as before.

    Made under a lock: a batch starts its first workers from several threads at once, and each thread
    that made a directory of its own would give its workers another PATH, so another fork server, which
    imports torch again."""
    with _SHIM_LOCK:
        return _make_shim()


@functools.cache
def _make_shim() -> Path | None:
    directory = Path(tempfile.mkdtemp(prefix="cudal1-ninja-"))
    atexit.register(shutil.rmtree, directory, True)
    shim = directory / "ninja"
    # imported by name from its own folder, appended (no module there can shadow the standard library).
    # -B (joined to -I: a #! line passes one argument): -I ignores PYTHONDONTWRITEBYTECODE and
    # PYTHONPYCACHEPREFIX, and bytecode written beside the source would change the package's tree.
    shim.write_text(f"#!{sys.executable} -IB\nimport sys\nsys.path.append({str(Path(__file__).resolve().parent)!r})\n"
                    "import toolchain\nsys.exit(toolchain.run(sys.argv))\n")
    shim.chmod(0o755)
    directory.chmod(0o755)
    try:
        subprocess.run([str(shim), "--version"], capture_output=True, check=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return directory


def first_on_path(path: str | None) -> str | None:
    """``path`` (a PATH value, None where unset) with the fail-fast ninja's directory first, so a build
    finds it before the real ninja; ``path`` as it was where the shim cannot run (:func:`shim_dir`)."""
    shim = shim_dir()
    if shim is None:
        return path
    return os.pathsep.join([str(shim), *([path] if path else [])])


# --- ninja's dependency log

DEPS_LOG = ".ninja_deps"
MAX_LOG = 16 << 20  # an extension's log holds a few objects' headers: kilobytes
_HEADER = b"# ninjadeps\n"
_MAX_RECORD = (1 << 19) - 1  # ninja's kMaxRecordSize: a longer record is read as damage


def deps_log_damage(data: bytes) -> str:
    """What is wrong with a deps log's bytes, '' when ninja would read every record (format 3 or 4).

    A path record is the path, padded to 4 bytes, then the bitwise complement of its index, which is how
    ninja finds a record written out of order; a dependency record (size's high bit set) names the
    object and its dependencies by those indices, after the object's time (8 bytes in format 4).

    >>> path = lambda p, i: (len(p) + 4).to_bytes(4, "little") + p + (~i & 0xFFFFFFFF).to_bytes(4, "little")
    >>> deps = (16 | 1 << 31).to_bytes(4, "little") + bytes(4) + bytes(8) + (1).to_bytes(4, "little")
    >>> good = _HEADER + (4).to_bytes(4, "little") + path(b"main.o\\0\\0", 0) + path(b"main.cpp", 1) + deps
    >>> deps_log_damage(good)
    ''
    >>> deps_log_damage(good + path(b"main.o\\0\\0", 0))  # a second writer's first record
    'path record 2 at byte 68 says it is record 0'
    >>> deps_log_damage(good[:-3])
    'record at byte 48 ends past the end of the file (65 bytes)'
    """
    if not data.startswith(_HEADER) or len(data) < len(_HEADER) + 4:
        return "no ninja deps header"
    version = int.from_bytes(data[12:16], "little")
    if version not in (3, 4):
        return f"format {version}, not 3 or 4"
    first_dep = 3 if version == 4 else 2  # object id, then its time: two words in format 4, one in 3
    offset, nodes = 16, 0
    while offset < len(data):
        if offset + 4 > len(data):
            return f"record at byte {offset} cut short"
        word = int.from_bytes(data[offset:offset + 4], "little")
        is_deps, size = bool(word >> 31), word & 0x7FFFFFFF
        if size > _MAX_RECORD or size % 4 or size < 4:
            return f"record at byte {offset} has size {size}"
        body = data[offset + 4:offset + 4 + size]
        if len(body) < size:
            return f"record at byte {offset} ends past the end of the file ({len(data)} bytes)"
        if is_deps:
            ids = [int.from_bytes(body[i:i + 4], "little", signed=True) for i in range(0, size, 4)]
            if len(ids) < first_dep or not all(0 <= i < nodes for i in [ids[0], *ids[first_dep:]]):
                return f"dependency record at byte {offset} names a path not recorded before it"
        else:
            said = ~int.from_bytes(body[-4:], "little") & 0xFFFFFFFF
            if said != nodes:
                return f"path record {nodes} at byte {offset} says it is record {said}"
            nodes += 1
        offset += 4 + size
    return ""


def _read_regular(path: Path, limit: int) -> bytes | None:
    """A regular file's bytes, at most ``limit``; None for anything else. The folder is a candidate's: the
    parent reads it as root, so a link is not followed, and a pipe or a device (which would block or never
    end) is not read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, limit)
    except OSError:
        return None
    finally:
        os.close(fd)


def damaged(folder: Path) -> str:
    """What is wrong with ``folder``'s deps log, '' when it is whole, absent or unreadable (ninja then
    says so itself). A log larger than ninja's own builds ever write (``MAX_LOG``) is damage too."""
    data = _read_regular(folder / DEPS_LOG, MAX_LOG + 1)
    if data is None:
        return ""
    if len(data) > MAX_LOG:
        return f"larger than {MAX_LOG} bytes"
    return deps_log_damage(data)


def heal(folder: Path) -> str:
    """Remove ``folder``'s deps log if it is damaged, so the next build compiles once and writes it afresh;
    returns what was wrong ('' when nothing was, or the log could not be removed)."""
    why = damaged(folder)
    if not why:
        return ""
    try:
        (folder / DEPS_LOG).unlink()
    except OSError:
        return ""
    return why


def damaged_builds(candidate_folder: Path) -> list[str]:
    """The build folders under one candidate's extensions folder whose deps log is damaged, with why."""
    try:
        folders = [f for f in candidate_folder.iterdir() if (f / "build.ninja").is_file()]
    except OSError:
        return []
    return [f"{f.name}: {why}" for f in sorted(folders) if (why := damaged(f))]


# --- the precompiled torch header

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
        _beside(target)
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
    _beside(target)
    return f"compiled in {time.perf_counter() - started:.1f} s: {target / name}"


def _beside(target: Path) -> None:
    """The header GCC opens beside the ``.gch`` it loaded when a program's own C++ includes
    <torch/extension.h> again (without it: "No such file or directory", and a GPU batch measured the
    PyTorch fallback): it hands the include on to torch's header, which ``#pragma once`` then skips."""
    beside = target.with_suffix("")  # .../torch/extension.h
    if not beside.is_file():
        tmp = beside.with_name(f".{beside.name}.{os.getpid()}")
        tmp.write_text(f"#include_next <{HEADER.as_posix()}>\n")
        tmp.chmod(0o444)
        os.replace(tmp, beside)


def main(argv: list[str]) -> None:
    """Compile the precompiled torch header into an extensions root (the batch's parent runs it)."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m cudal1.evaluator.toolchain", description=main.__doc__)
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
