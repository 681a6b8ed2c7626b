"""``ninja`` for the evaluator's workers: an extension build stops at its first failed compile.

torch builds an inline extension with ninja: the ``main.cpp`` it writes and the program's CUDA file,
side by side. When one compile fails the build has failed, but ninja lets the compiles already running
go to their end before it says so. Most of CUDA-L1's programs bind a function their C++ never declares
(63 of the 72 H100 release programs that build an extension fail on the H100): their ``main.cpp`` fails
in seconds, and the CUDA file's compile, most of a build (60-230 s on the H100 host), ran on for nothing,
on the cores the other builds and the timing share. The worker's PATH finds this script as ``ninja``
first; it runs the real ninja, passes its output through unchanged, and stops it (SIGTERM: ninja stops
its compiles and reports the build interrupted) half a second after ninja reports a failed compile, so
ninja has printed that compile's errors. The build fails as it would have, with the same first error,
which is what the program catches and what the evaluator remembers (extensions.py); what is lost is
only the rest of a build that could not succeed.

Standard library only: it runs as its own interpreter (``-I``) in a build, not as part of the package.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

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
    that made a directory of its own gave its workers another PATH, so another fork server, which imports
    torch again (three servers at a 2-core machine's start, found by benchmarks/batch_start.py)."""
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
                    "import failfast\nsys.exit(failfast.run(sys.argv))\n")
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
