"""The precompiled torch header (cudal1.evaluator.toolchain): compiled once with torch's own flags, found by a
worker's builds through CPATH, and without effect on what a build produces. Real g++, real torch headers,
real workers; the run's one header (tests/servers.py, ~40 s to compile on two cores)."""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from ext_helpers import FAST, fixture_problem

from cudal1.candidates import Candidate
from cudal1.evaluator import EvalConfig
from cudal1.evaluator.builds import prebuild, prebuild_header, wants_header
from cudal1.evaluator.extensions import FAILED
from cudal1.evaluator.sandbox import processes
from cudal1.evaluator.toolchain import HEADER, cpath, header_command, prepare, search_dir
from cudal1.evaluator.workers import extensions_folder
from tests import servers

# Builds an extension whose compile prints the headers it reads (-H: "! <file>.gch" where GCC loaded a
# precompiled header) and then stops: the failure, with the compiler's output, is what the worker
# remembers next to the candidate's builds (extensions.py), so the test can read it. FLAGS: GCC's own.
PROBE = '''
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

try:
    _ext = load_inline(name="cudal1_pch_probe", cpp_sources="int f();\\n#error stop here",
                       extra_cflags=FLAGS)
except Exception:
    _ext = None


class ModelNew(nn.Module):
    def forward(self, x):
        return x * 2 + 1
'''

# torch's main.cpp for a program whose own C++ includes the header again, as many released programs do: with
# the header loaded, GCC looked for the second include where it found the .gch, and the build failed
MAIN = """#include <torch/extension.h>
#include <torch/extension.h>
torch::Tensor twice(torch::Tensor x) { return x * 2; }
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("twice", &twice, "twice"); }
"""


@pytest.fixture(scope="module")
def header_root() -> Iterator[Path]:
    """An extensions root (traversable by sandboxed workers) holding the run's compiled header
    (tests/servers.py), compiled as a batch compiles it: a process of its own, nice 19."""
    compiled = servers.header_root()
    message = (compiled / "prepared").read_text()
    assert message.startswith("compiled in "), message
    for root in servers.reachable("cudal1-test-pch-"):
        yield servers.link_header(root)


@pytest.mark.slow
def test_the_header_is_compiled_once_per_compiler_and_torch(header_root: Path) -> None:
    headers = list((search_dir(header_root) / f"{HEADER}.gch").iterdir())
    assert len(headers) == 1 and headers[0].suffix == ".gch" and headers[0].stat().st_mode & 0o777 == 0o444
    assert prepare(header_root) == f"present: {headers[0]}"  # a second batch finds it
    beside = search_dir(header_root) / HEADER  # what a second include of the header opens: handed on
    assert beside.read_text() == f"#include_next <{HEADER}>\n" and beside.stat().st_mode & 0o777 == 0o444
    assert not any((search_dir(header_root) / "tmp").iterdir())  # nothing half-written left behind


def test_a_gpu_batch_compiles_the_header_for_four_extension_builds_or_more() -> None:
    sources = [f"from torch.utils.cpp_extension import load_inline  # {i}" for i in range(4)]
    four = [Candidate("p", source) for source in sources]
    gpu = EvalConfig(device="cuda:0")
    assert wants_header(four, gpu)
    assert not wants_header(four[:3] + [Candidate("p", sources[0])], gpu)  # the same source is one build
    assert not wants_header([Candidate("p", "import torch") for _ in range(9)], gpu)
    assert not wants_header(four, FAST)  # a CPU device: the timing would pause it most of the time


def _remembered_compile(root: Path, flags: list[str]) -> str:
    source = PROBE.replace("FLAGS", repr(flags))
    problem, candidate = fixture_problem("scale_shift"), Candidate("ext-scale_shift", source, origin="test")
    assert prebuild(problem, candidate, FAST, root) == ""  # the program falls back to PyTorch
    markers = list(extensions_folder(root, candidate).glob(f"{FAILED}/*"))
    assert len(markers) == 1
    return markers[0].read_text()


@pytest.mark.slow
def test_a_worker_build_loads_the_header_and_one_without_it_parses_it(header_root: Path, ext_root: Path) -> None:
    """Through the real path: a build worker's load_inline, torch's ninja file, g++."""
    log = _remembered_compile(header_root, ["-H"])
    assert "error: #error stop here" in log
    assert f"! {search_dir(header_root)}/{HEADER}.gch/" in log, log[:2000]
    # An extensions root without the header: torch's headers are read as usual. Preprocessed only (-E) to
    # spare the 20 s parse; -fpch-preprocess keeps the search for a precompiled header as in a compile (a
    # .gch in reach would still be loaded, and listed by -H with "!").
    bare = _remembered_compile(ext_root, ["-H", "-E", "-fpch-preprocess"])
    # -H lists every header it parses (". <path>"), the first being torch's own extension.h
    assert ".gch" not in bare and re.search(rf"^\. \S+/include/{HEADER}$", bare, re.MULTILINE), bare[:2000]


def _torch_compile_line() -> list[str]:
    """The header's flags for a main.cpp: its command without "-x c++-header <header>"."""
    command = header_command()
    assert command is not None, "the test needs GCC"
    i = command.index("-x")
    return command[:i] + command[i + 2:-1] + ["-DTORCH_EXTENSION_NAME=cudal1_pch_same"]


@pytest.mark.slow
def test_an_object_built_with_the_header_is_byte_for_byte_the_one_built_without(header_root: Path,
                                                                                tmp_path: Path) -> None:
    compile_ = _torch_compile_line()
    (tmp_path / "main.cpp").write_text(MAIN)
    objects = {}
    for name, extra in (("without", {}), ("with", {"CPATH": cpath(header_root)})):
        env = {k: v for k, v in os.environ.items() if k != "CPATH"} | extra
        done = subprocess.run([*compile_, "-H", "-c", "main.cpp", "-o", f"{name}.o"], cwd=tmp_path, env=env,
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
        assert (done.stderr.startswith("! ") and ".gch" in done.stderr.splitlines()[0]) == (name == "with")
        objects[name] = (tmp_path / f"{name}.o").read_bytes()
    assert objects["with"] == objects["without"]


def test_a_compile_still_running_when_the_batch_ends_is_stopped_and_leaves_nothing(tmp_path: Path) -> None:
    """A batch whose devices timed all along kept its header compile paused, then waited for it before it
    returned (two H200s, cold cache): ``stop`` kills the compile, and its half-written header goes."""
    stop = threading.Event()
    result: list[tuple[str, float]] = []
    compiling = threading.Thread(target=lambda: result.append(prebuild_header(tmp_path, FAST, stop)))
    compiling.start()
    scratch = search_dir(tmp_path) / "tmp"
    deadline = time.monotonic() + 120
    while not (scratch.is_dir() and any(scratch.iterdir())) and time.monotonic() < deadline:
        time.sleep(0.1)  # torch's flags are read first (seconds); then the compile writes into scratch
    assert any(scratch.iterdir()), "the compile never started"
    # this test's compile only: another worker may be compiling the run's header (tests/servers.py) meanwhile
    ours = [b"cudal1.evaluator.toolchain", str(tmp_path).encode()]
    sessions = {p.session for p in processes() if all(part in _cmdline(p.pid) for part in ours)}
    assert sessions, "no compile process found"
    stop.set()
    t0 = time.monotonic()
    compiling.join(timeout=30)
    assert not compiling.is_alive() and time.monotonic() - t0 < 5  # ended within a poll, not ~40 s later
    message, _ = result[0]
    assert message == "stopped: the batch's evaluations were done first"
    assert not any(scratch.iterdir())  # the half-written header is gone
    assert not list((search_dir(tmp_path) / f"{HEADER}.gch").glob("*.gch"))
    # the compiler went with it (dead children of its session wait for init to reap them: "Z"). A process
    # SIGKILLed a moment ago can still read "R" while the kernel tears it down (seen once under make test's
    # load), so it gets a few seconds to go.
    def left() -> list:
        return [p for p in processes() if p.session in sessions and p.state != "Z"]

    deadline = time.monotonic() + 5
    while left() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not left()


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""
