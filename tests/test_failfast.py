"""The workers' ninja (cudal1.evaluator.toolchain): a build stops at its first failed compile, its output
passes through unchanged, and a build that succeeds is ninja's own. Real ninja, real g++, real workers."""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ext_helpers import FAST, fixture_problem

from cudal1.candidates import Candidate
from cudal1.evaluator.builds import prebuild
from cudal1.evaluator.extensions import FAILED
from cudal1.evaluator.toolchain import first_on_path, real_ninja, shim_dir
from cudal1.evaluator.workers import extensions_folder

BUILD = """rule fail
  command = echo compiling $out; echo "$out: error: boom"; exit 1
rule slow
  command = sleep $delay && touch $out
rule ok
  command = touch $out
build bad: fail
build slow-done: slow
  delay = {delay}
build good: ok
"""


def _shim() -> Path:
    own = shim_dir()
    assert own is not None, "the fail-fast ninja does not run here"
    return own


def _ninja(folder: Path, *args: str, shim: bool = True) -> subprocess.CompletedProcess:
    path = os.environ.get("PATH", "")
    env = os.environ | {"PATH": f"{_shim()}{os.pathsep}{path}" if shim else path}
    return subprocess.run(["ninja", *args], cwd=folder, env=env, capture_output=True, text=True, timeout=120)


def test_the_shim_finds_the_real_ninja_past_itself() -> None:
    own = _shim()
    found = real_ninja(own, f"{own}{os.pathsep}{os.environ.get('PATH', '')}")
    assert found is not None and Path(found).parent != own
    beside = Path(sys.executable).parent / "ninja"  # the environment's own ninja first, whatever PATH says
    expected = subprocess.run([str(beside) if beside.is_file() else "ninja", "--version"], capture_output=True,
                              text=True).stdout
    assert _ninja(own, "--version").stdout == expected
    assert first_on_path("/usr/bin") == f"{own}{os.pathsep}/usr/bin"  # a worker's PATH (process.py)
    assert first_on_path(None) == first_on_path("") == str(own)


def test_the_shim_prefers_the_ninja_beside_its_interpreter_to_path(tmp_path: Path) -> None:
    """Two ninja versions on one cache redo every command of each other's builds, so a worker's ninja does
    not depend on whether the user's PATH has the environment's bin."""
    own = _shim()
    env_bin = tmp_path / "env-bin"
    env_bin.mkdir()
    assert real_ninja(own, "/usr/bin", beside=env_bin) == shutil.which("ninja", path="/usr/bin")  # none beside
    (env_bin / "ninja").write_text("#!/bin/sh\n")
    (env_bin / "ninja").chmod(0o755)
    assert real_ninja(own, f"/usr/bin{os.pathsep}{env_bin}", beside=env_bin) == str(env_bin / "ninja")


def test_a_failed_compile_stops_the_compiles_still_running(tmp_path: Path) -> None:
    # an odd delay, so that no other process's "sleep" on the machine matches the search below
    (tmp_path / "build.ninja").write_text(BUILD.format(delay=59.731))
    done = _ninja(tmp_path, "-v", "-j", "3", "bad", "slow-done")
    assert done.returncode != 0
    # ninja's report, whole ("FAILED: bad" up to ninja 1.12, "FAILED: [code=1] bad" from 1.13: pip's ninja)
    assert re.search(r"^FAILED: (\[code=\d+\] )?bad", done.stdout, re.M) and "bad: error: boom" in done.stdout
    assert "build stopped: interrupted" in done.stdout
    assert not (tmp_path / "slow-done").exists()  # stopped, not waited for (it would take 60 s)
    leftover = subprocess.run(["pgrep", "-f", "sleep 59.731"], capture_output=True, text=True).stdout.split()
    assert not leftover, leftover


def test_a_build_that_succeeds_is_ninjas_own(tmp_path: Path) -> None:
    (tmp_path / "build.ninja").write_text(BUILD.format(delay=0))
    done = _ninja(tmp_path, "-v", "slow-done", "good")
    assert done.returncode == 0, done.stdout
    assert (tmp_path / "slow-done").exists() and (tmp_path / "good").exists()
    again = _ninja(tmp_path, "-v", "slow-done", "good")
    assert again.stdout == "ninja: no work to do.\n"


# A program whose extension has two sources: one fails at once, the other takes ~20 s (torch's C++ API).
# Its build is remembered as failed with ninja's output (extensions.py), which says ninja was stopped.
TWO_SOURCES = '''
from pathlib import Path

import torch.nn as nn
from torch.utils.cpp_extension import load

Path("slow.cpp").write_text("#include <torch/extension.h>\\nint slow() { return 1; }\\n")
Path("bad.cpp").write_text("#error this source does not compile\\n")
try:
    _ext = load(name="cudal1_failfast_probe", sources=["slow.cpp", "bad.cpp"])
except Exception:
    _ext = None


class ModelNew(nn.Module):
    def forward(self, x):
        return x * 2 + 1
'''


@pytest.mark.slow
def test_a_worker_build_stops_at_its_first_failed_compile(ext_root: Path) -> None:
    problem, candidate = fixture_problem("scale_shift"), Candidate("ext-scale_shift", TWO_SOURCES, origin="test")
    assert prebuild(problem, candidate, FAST, ext_root) == ""  # the program falls back to PyTorch
    markers = list(extensions_folder(ext_root, candidate).glob(f"{FAILED}/*"))
    assert len(markers) == 1
    log = markers[0].read_text()
    assert "#error this source does not compile" in log
    assert "build stopped: interrupted" in log, log[-2000:]


def test_threads_starting_workers_at_once_get_one_shim_so_one_fork_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch starts its first workers from several threads at once; a shim directory each gave their
    workers different PATHs, and the fork servers are keyed by the environment: three servers, each
    importing torch, at a 2-core machine's start."""
    import threading

    from cudal1.evaluator import toolchain

    monkeypatch.setattr(toolchain, "_make_shim", functools.cache(toolchain._make_shim.__wrapped__))
    barrier = threading.Barrier(6)
    paths: list[str | None] = []

    def start() -> None:
        barrier.wait()
        paths.append(first_on_path("/usr/bin"))

    threads = [threading.Thread(target=start) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(paths) == 6 and len(set(paths)) == 1, set(paths)
