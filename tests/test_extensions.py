"""Extension builds in workers: failed compiles are remembered per candidate, builds are counted, and a
batch loads the next candidate while the current one is checked (CPU, real g++ and real workers)."""

from __future__ import annotations

import os
from concurrent.futures import Future
from pathlib import Path

import pytest
import torch
import torch.utils.cpp_extension as cpp
from ext_helpers import FAST, fallback_program, fixture_problem

from cudal1.candidates import Candidate, Status
from cudal1.evaluator import EvalConfig, extensions
from cudal1.evaluator.batch import evaluate_many
from cudal1.evaluator.core import evaluate_candidate
from cudal1.evaluator.extensions import FAILED, install
from cudal1.evaluator.toolchain import first_on_path
from cudal1.problems import Problem

pytestmark = pytest.mark.torch_header  # builds here skip parsing torch's headers (tests/conftest.py)

# Does not compile; the program falls back to PyTorch.
FALLBACK = fallback_program("cudal1_test_fallback", """
#include <torch/extension.h>
torch::Tensor scale_shift(torch::Tensor x) { int broken = x; return x; }
""")


def test_failed_build_is_remembered_and_raised_again_without_compiling(monkeypatch: pytest.MonkeyPatch,
                                                                       tmp_path: Path) -> None:
    calls: list[str] = []

    def failing(name: str, **kwargs: object) -> None:
        calls.append(name)
        raise RuntimeError(f"Error building extension '{name}': error: cannot convert")

    def flaky(name: str, **kwargs: object) -> None:
        calls.append(name)
        raise RuntimeError("ninja: build stopped: interrupted by the user")  # not a compiler failure

    monkeypatch.setattr(cpp, "load_inline", failing)
    monkeypatch.setattr(cpp, "load", flaky)
    first = install(str(tmp_path))
    for _ in range(2):
        with pytest.raises(RuntimeError, match="Error building extension 'm'"):
            cpp.load_inline("m", cpp_sources="int f();")
    assert calls == ["m"]  # the second call was answered from the remembered failure
    assert first.summary()["calls"] == 2 and first.summary()["failed"] == 1 and first.summary()["cached_failures"] == 1
    with pytest.raises(RuntimeError, match="Error building extension 'other'"):
        cpp.load_inline("other", cpp_sources="int g();")  # another build is its own entry
    for _ in range(2):
        with pytest.raises(RuntimeError, match="interrupted"):
            cpp.load("n", sources=[])
    assert calls == ["m", "other", "n", "n"]  # a non-compiler failure is never frozen into the cache
    assert len(list((tmp_path / FAILED).iterdir())) == 2


def test_a_name_made_from_the_process_id_builds_the_same_in_every_worker(monkeypatch: pytest.MonkeyPatch,
                                                                         tmp_path: Path) -> None:
    """L1-93 names its build f"masked_cumsum_{os.getpid()}": each worker asked torch for another build.
    Two workers (two process ids) now ask for the same one, its module declaration renamed with it."""
    seen: list[tuple[str, str]] = []

    def builder(name: str, cpp_sources: str = "", **kwargs: object) -> str:
        seen.append((name, cpp_sources))
        return name

    monkeypatch.setattr(cpp, "load_inline", builder)
    install(str(tmp_path))
    for pid in (4242, 5151):
        monkeypatch.setattr(os, "getpid", lambda pid=pid: pid)
        name = f"masked_cumsum_{os.getpid()}"
        cpp.load_inline(name=name, cpp_sources=f"PYBIND11_MODULE({name}, m) {{}}")
        cpp.load_inline(f"kernel_v42_{os.getpid()}x", cpp_sources="int f();")  # positional, digits kept
    assert seen[0] == seen[2] == ("masked_cumsum_pid", "PYBIND11_MODULE(masked_cumsum_pid, m) {}")
    assert seen[1] == seen[3] == ("kernel_v42_pidx", "int f();")


def test_a_cached_build_done_again_says_why(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A build folder that already holds its module is a cache hit; where the call writes the module again
    the load says why, from ninja's own dry run before the call (real ninja; a copy stands in for the
    compiler), and where torch changed the build's command lines, which lines."""
    import shutil
    import subprocess

    if shutil.which("ninja") is None:
        pytest.skip("needs ninja")
    folder = tmp_path / "ext" / "kernel"
    folder.mkdir(parents=True)
    (folder / "kernel.cu").write_text("// kernel")

    def ninja_file(flags: str) -> str:
        return f"rule compile\n  command = cp $in $out # {flags}\nbuild kernel.so: compile kernel.cu\n"

    def builder(name: str, flags: str = "-O2", **kwargs: object) -> str:  # torch's load_inline, in short
        text = ninja_file(flags)
        if not (folder / "build.ninja").is_file() or (folder / "build.ninja").read_text() != text:
            (folder / "build.ninja").write_text(text)
        subprocess.run(["ninja", "-C", str(folder)], check=True, capture_output=True)
        return name

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "ext"))
    monkeypatch.setenv("PATH", first_on_path(os.environ.get("PATH")) or "")  # the workers' fail-fast ninja first
    monkeypatch.setattr(cpp, "load_inline", builder)
    log = install(str(tmp_path / "ext"))
    cpp.load_inline("kernel")  # the first build: nothing cached, nothing to say
    cpp.load_inline("kernel")  # cached, loaded as it is
    assert log.rebuilt == []
    later = (folder / "kernel.so").stat().st_mtime_ns + 10**9
    os.utime(folder / "kernel.cu", ns=(later, later))  # a source newer than its module
    cpp.load_inline("kernel")
    assert len(log.rebuilt) == 1 and log.rebuilt[0].startswith("kernel: ") and "kernel.cu" in log.rebuilt[0], log.rebuilt
    cpp.load_inline("kernel", flags="-O3")  # torch writes another build.ninja: the command changed
    assert "torch wrote another build.ninja" in log.rebuilt[1] and "-O3" in log.rebuilt[1], log.rebuilt
    assert "rebuilt" in log.summary() and len(log.rebuilt) == 2

    # A load that takes long without building says so (L1-32 took 57-75 s on an H200 with its module cached)
    monkeypatch.setattr(extensions, "SLOW_LOAD_S", 0.0)
    earlier = (folder / "kernel.so").stat().st_mtime_ns - 10**9
    os.utime(folder / "kernel.cu", ns=(earlier, earlier))  # the module up to date again
    (folder / "lock").write_text("")
    cpp.load_inline("kernel", flags="-O3")
    assert log.rebuilt[2].startswith("kernel: nothing rebuilt, the cached module took"), log.rebuilt
    assert "lock file was there" in log.rebuilt[2], log.rebuilt
    (tmp_path / "ext" / "other").mkdir()
    folder = tmp_path / "ext" / "other"
    (folder / "kernel.cu").write_text("// kernel")
    cpp.load_inline("other")  # nothing cached in its folder: built in the load
    assert log.rebuilt[3].startswith("other: built in") and "no module was cached" in log.rebuilt[3], log.rebuilt


def test_a_damaged_ninja_deps_log_is_removed_before_the_build_so_it_builds_once(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Two ninjas writing one build folder (a killed run's compile still going when the next run builds the
    same program) leave the second's records after the first's. Real ninja then reads the log as cut short,
    finds the object out of date and compiles it again at every load (L1-88 and L1-97, 55-72 s a load on an
    H200). The load now removes the damaged log first: this build compiles once, the next loads nothing."""
    import shutil
    import subprocess

    from cudal1.evaluator import toolchain

    if shutil.which("ninja") is None:
        pytest.skip("needs ninja")
    folder = tmp_path / "ext" / "kernel"
    folder.mkdir(parents=True)
    (folder / "kernel.cu").write_text("// kernel")
    # a compile that writes a depfile, so ninja keeps a deps log as it does for torch's builds
    (folder / "build.ninja").write_text(
        "rule compile\n  command = cp $in $out && echo \"$out: $in\" > $out.d\n  depfile = $out.d\n  deps = gcc\n"
        "build kernel.so: compile kernel.cu\n")
    builds: list[str] = []

    def builder(name: str, **kwargs: object) -> str:  # torch's load_inline, in short: ninja in the folder
        out = subprocess.run(["ninja", "-C", str(folder)], capture_output=True, text=True, check=True).stdout
        builds.append(out)
        return name

    def dry_run() -> str:
        done = subprocess.run(["ninja", "-C", str(folder), "-n"], capture_output=True, text=True)
        return done.stdout + done.stderr

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "ext"))
    monkeypatch.setenv("PATH", first_on_path(os.environ.get("PATH")) or "")
    monkeypatch.setattr(cpp, "load_inline", builder)
    log = install(str(tmp_path / "ext"))
    cpp.load_inline("kernel")
    deps = folder / toolchain.DEPS_LOG
    assert toolchain.damaged(folder) == "" and "no work to do" in dry_run()
    # a second ninja that found the log empty compiled the object again, later, and appended its own
    # records, numbered from 0 again: ninja drops them as damage, and the object is newer than its record
    deps.write_bytes(deps.read_bytes() + deps.read_bytes()[16:])
    later = (folder / "kernel.so").stat().st_mtime_ns + 10**9
    os.utime(folder / "kernel.so", ns=(later, later))
    assert "says it is record 0" in toolchain.damaged(folder)
    assert "no work to do" not in dry_run()  # ninja itself would compile again
    assert toolchain.damaged_builds(tmp_path / "ext") == [f"kernel: {toolchain.damaged(folder)}"]

    cpp.load_inline("kernel")
    assert len(log.healed) == 1 and log.healed[0].startswith("kernel: path record"), log.healed
    assert "healed" in log.summary()
    assert toolchain.damaged(folder) == "" and "no work to do" in dry_run()
    cpp.load_inline("kernel")
    assert "no work to do" in builds[-1] and len(log.healed) == 1


PID_NAMED = """
import os, sys
from cudal1.evaluator.extensions import install
install(sys.argv[1])
import torch.utils.cpp_extension as cpp
m = cpp.load_inline(name=f"cudal1_pid_named_{os.getpid()}", cpp_sources="int twice(int x) { return 2 * x; }",
                    functions=["twice"])
print(m.__name__, m.twice(21))
"""


@pytest.mark.slow
def test_two_processes_share_the_build_of_a_name_made_from_the_process_id(tmp_path: Path) -> None:
    """Real g++, two interpreters: the first builds once, the second loads that build instead of compiling
    under its own process id. The build finds the run's precompiled torch header, as a worker's does
    (tests/conftest.py's torch_header mark): 30.8 s of g++ without it on the CPU machine."""
    import subprocess
    import sys

    from cudal1.evaluator.toolchain import cpath
    from tests import servers

    cache = tmp_path / "cache"
    env = os.environ | {"TORCH_EXTENSIONS_DIR": str(cache), "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
                        "CPATH": cpath(servers.header_root())}
    outputs, built = [], []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", PID_NAMED, str(cache)], env=env, capture_output=True,
                              text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        outputs.append(done.stdout.strip().splitlines()[-1])
        built.append({p.name: p.stat().st_mtime_ns for p in cache.rglob("*.so")})
    assert outputs == ["cudal1_pid_named_pid 42"] * 2
    assert [d.name for d in cache.iterdir() if not d.name.startswith(".")] == ["cudal1_pid_named_pid"]
    assert built[0] == built[1] and len(built[0]) == 1  # the second process compiled nothing


@pytest.mark.slow
def test_fallback_after_failed_compile_is_measured_and_flagged(ext_root: Path) -> None:
    problem, candidate = fixture_problem("scale_shift"), Candidate("ext-scale_shift", FALLBACK, origin="test")
    first = evaluate_candidate(problem, candidate, FAST, extensions_root=ext_root)
    assert first.status is Status.OK, first.reason
    assert "extension_build_failed" in first.flags
    markers = list(ext_root.glob(f"*/{FAILED}/*"))
    assert len(markers) == 1 and "Error building extension" in markers[0].read_text()
    again = evaluate_candidate(problem, candidate, FAST, extensions_root=ext_root)  # answered from the marker
    assert again.status is Status.OK and "extension_build_failed" in again.flags


@pytest.mark.slow
def test_batch_with_loads_ahead_evaluates_each_candidate_against_its_own_problem(ext_root: Path) -> None:
    """Several problems, several candidates each, one wrong: the next candidate is loaded while the
    current one is checked, and every result belongs to the program it names."""
    stems = ("scale_shift", "relu", "min_clamp")
    problems = [fixture_problem(s) for s in stems]
    candidates = []
    for p in problems:
        right = p.source.replace("class Model(", "class ModelNew(")
        wrong = right.replace("def forward(self", "def _forward(self").replace(
            "class ModelNew(nn.Module):", "class ModelNew(nn.Module):\n    def forward(self, *a):\n"
            "        return self._forward(*a) + 1\n")
        candidates += [Candidate(p.problem_id, right, origin="right"), Candidate(p.problem_id, wrong, origin="wrong")]
    results = evaluate_many(problems, candidates, FAST, devices=["cpu"], extensions_root=ext_root)
    assert len(results) == 6
    by_id = {c.candidate_id: c for c in candidates}
    for result in results:
        origin = by_id[result.candidate_id].origin
        assert (result.status is Status.OK) == (origin == "right"), (result.problem_id, origin, result.reason)
        assert result.candidate_sha256 == by_id[result.candidate_id].sha256


def _three_problems() -> tuple[list[Problem], list[Candidate]]:
    stems = ("scale_shift", "relu", "min_clamp")
    problems = [fixture_problem(s) for s in stems]
    return problems, [Candidate(p.problem_id, p.source.replace("class Model(", "class ModelNew("), origin="right")
                      for p in problems]


@pytest.mark.slow
def test_a_harness_failure_is_recorded_against_the_harness_and_the_batch_goes_on(
        ext_root: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Run L: the parent ran out of device memory comparing one problem's outputs, the device thread died
    and the batch returned 32 of 210 evaluations. Now that evaluation names the harness and the rest run."""
    from cudal1.evaluator import recheck
    from cudal1.training.rewards import harness_failed

    real = recheck.evaluate_candidate

    def evaluate(problem: Problem, candidate: Candidate, config: EvalConfig, **kwargs: object):  # type: ignore[no-untyped-def]
        result = real(problem, candidate, config, **kwargs)  # type: ignore[arg-type]
        if problem.name == "relu":  # the parent fails after the workers are done and closed
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 4.92 GiB")
        return result

    monkeypatch.setattr(recheck, "evaluate_candidate", evaluate)
    problems, candidates = _three_problems()
    results = evaluate_many(problems, candidates, FAST, devices=["cpu"], extensions_root=ext_root,
                            results_path=tmp_path / "r.parquet")
    by_problem = {r.problem_id: r for r in results}
    assert len(results) == 3
    failed = by_problem["ext-relu"]
    assert failed.status is Status.RUNTIME_ERROR and failed.flags == ("harness_failed", "retried_alone")
    assert failed.reason.startswith("harness failed: OutOfMemoryError: CUDA out of memory")
    assert harness_failed(failed.status.value, failed.reason)  # RL leaves it out of the reward groups
    assert by_problem["ext-scale_shift"].status is Status.OK and by_problem["ext-min_clamp"].status is Status.OK


@pytest.mark.slow
def test_a_dead_device_loop_raises_and_keeps_what_was_measured(
        ext_root: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from cudal1.candidates import load_evaluations
    from cudal1.evaluator import recheck

    calls = []

    def broken(config: EvalConfig) -> None:
        calls.append(1)
        if len(calls) == 2:
            raise SystemError("the device loop itself broke")

    monkeypatch.setattr(recheck, "release_cache", broken)
    problems, candidates = _three_problems()
    path = tmp_path / "r.parquet"
    with pytest.raises(RuntimeError, match="stopped after 1 evaluations.*run again to resume"):
        evaluate_many(problems, candidates, FAST, devices=["cpu"], extensions_root=ext_root, results_path=path)
    assert len(load_evaluations(path)) == 1
    monkeypatch.undo()
    rest = evaluate_many(problems, candidates, FAST, devices=["cpu"], extensions_root=ext_root, results_path=path)
    assert len(rest) == 2 and len(load_evaluations(path)) == 3


@pytest.mark.slow
def test_out_of_memory_is_retried_with_nothing_running_ahead(
        ext_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run M: L2-34's reference ran out of device memory beside the workers loaded ahead. The candidate
    is evaluated once more, alone, and only a second failure is recorded."""
    from cudal1.evaluator import recheck
    from cudal1.evaluator.references import ReferenceError

    real, seen = recheck.evaluate_candidate, []

    def evaluate(problem: Problem, candidate: Candidate, config: EvalConfig, **kwargs: object):  # type: ignore[no-untyped-def]
        seen.append((problem.name, kwargs.get("prepared") is not None))
        result = real(problem, candidate, config, **kwargs)  # type: ignore[arg-type]
        if problem.name == "relu" and seen.count(("relu", True)) == 1 and kwargs.get("prepared") is not None:
            raise ReferenceError("ext-relu: reference failed while timed: out of memory: CUDA out of memory")
        return result

    monkeypatch.setattr(recheck, "evaluate_candidate", evaluate)
    problems, candidates = _three_problems()
    results = {r.problem_id: r for r in evaluate_many(problems, candidates, FAST, devices=["cpu"],
                                                     extensions_root=ext_root)}
    assert results["ext-relu"].status is Status.OK and "retried_alone" in results["ext-relu"].flags
    assert ("relu", False) in seen  # the retry prepared its own worker: nothing ran ahead of it
    assert all(r.status is Status.OK for r in results.values())


SLOW_REFERENCE = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        for _ in range(30):
            y = torch.tanh(x)
        return y


def get_inputs():
    return [torch.randn(256, 1024)]


def get_init_inputs():
    return []
'''

# Honest and faster (one tanh instead of thirty), but its first call after a pause tunes itself for
# 0.4 s, as a cudnn.benchmark program did on its first call of each batch on the H100
# (docs/gpu-runs.md at 88f971b, 2026-11-23-release-210).
TUNES_ON_FIRST_CALL = '''
import time
import torch
import torch.nn as nn

_last = [0.0]


class ModelNew(nn.Module):
    def forward(self, x):
        now = time.perf_counter()
        if now - _last[0] > 0.02:  # idle since its last batch (the reference's batch ran in between)
            while time.perf_counter() - now < 0.4:  # busy: the rules reject sleeping
                pass
        _last[0] = time.perf_counter()
        return torch.tanh(x)
'''


def test_a_program_that_tunes_on_its_warm_up_call_is_not_called_a_forger(ext_root: Path) -> None:
    """Run M rejected four cudnn.benchmark rows as forged clocks: the warm-up call sat inside the parent's
    wall clock of the timed batch. It is now a command of its own."""
    problem = Problem("ext-slow_tanh", 1, "slow_tanh", SLOW_REFERENCE, suite="test")
    cfg = EvalConfig(correctness_trials=2, timing_trials=5, target_trial_ms=100.0, recheck_above=None, remeasure=0)
    result = evaluate_candidate(problem, Candidate(problem.problem_id, TUNES_ON_FIRST_CALL), cfg, extensions_root=ext_root)
    assert result.status is Status.OK, result.reason
    assert (result.speedup or 0) > 1.5  # and it is measured as the faster program it is


_COMPILED_PROGRAM = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()
        self.fn = torch.compile(lambda x: x * 2)

    def forward(self, x):
        return self.fn(x)
'''

_SMALL_REFERENCE = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * 2


def get_inputs():
    return [torch.randn(64)]


def get_init_inputs():
    return []
'''


@pytest.mark.parametrize("build_only", [False, True])
def test_a_build_worker_loads_without_the_timing_preparations(tmp_path: Path, build_only: bool) -> None:
    """A build worker's load (build_only) makes nothing the timed path needs: no input plan, no graph,
    and no stand-in torch.compile before the snapshot (a C++ compile on a CPU worker); a timed worker's
    load makes the plan. Either way the program is constructed, which is where extensions build."""
    from cudal1.evaluator.worker import Worker

    (tmp_path / "reference.py").write_text(_SMALL_REFERENCE)
    (tmp_path / "candidate.py").write_text(_COMPILED_PROGRAM)
    worker = Worker("cpu", 1, flush_l2=False)
    reply = worker.load({"role": "candidate", "reference_path": str(tmp_path / "reference.py"),
                         "candidate_path": str(tmp_path / "candidate.py"), "init_seed": 0,
                         "build_only": build_only})
    assert reply["ok"], reply
    assert worker.model is not None
    assert (worker.plan is None) is build_only


@pytest.mark.slow  # three real extension builds, about a minute: `make test` runs it, the fast tier does not
def test_builds_are_submitted_in_the_order_the_groups_are_timed(monkeypatch: pytest.MonkeyPatch,
                                                                ext_root: Path) -> None:
    """Candidates listed program-first across problems (as a reproduction lists its programs, then the
    baselines): the build of the first problem's second candidate comes before the next problem's, so
    the first group is not held back by every other problem's build."""
    import cudal1.evaluator.schedule as schedule

    scale, relu = fixture_problem("scale_shift"), fixture_problem("relu")
    broken = "this is not C++"  # fails at once: the order is the point, not the build
    plain = Candidate(scale.problem_id, scale.source.replace("class Model(", "class ModelNew("), origin="plain")
    later = Candidate(relu.problem_id, fallback_program("order_relu", broken), origin="second problem")
    first = Candidate(scale.problem_id, fallback_program("order_scale", broken), origin="first problem")
    built: list[str] = []
    real = schedule.timed_prebuild

    def recorded(problem: Problem, candidate: Candidate, *args: object) -> tuple[str, float]:
        built.append(candidate.origin)
        return real(problem, candidate, *args)

    monkeypatch.setattr(schedule, "timed_prebuild", recorded)
    results = evaluate_many([scale, relu], [plain, later, first], FAST, devices=["cpu"], extensions_root=ext_root,
                            build_workers=1)
    assert built == ["first problem", "second problem"]
    assert len(results) == 3
    # Each built candidate's evaluation carries its build's own wall (a cold batch's waits are made of it)
    origins = {c.candidate_id: c.origin for c in (plain, later, first)}
    prebuilt = {origins[r.candidate_id]: r.extra.get("prebuild_s") for r in results}
    assert prebuilt["plain"] is None
    assert all(isinstance(prebuilt[o], float) and prebuilt[o] > 0 for o in ("first problem", "second problem"))


class RecordingPool:
    """A build pool that records what submit_builds hands it (each build's candidate and warm-up device)
    and runs nothing: the schedule is the point."""

    def __init__(self) -> None:
        self.built: list[str] = []
        self.devices: list[str] = []

    def submit(self, _fn: object, _problem: Problem, candidate: Candidate, config: EvalConfig, _root: Path) -> Future:
        self.built.append(candidate.origin)
        self.devices.append(config.device)
        return Future()


def test_gpu_warm_ups_go_to_every_device_in_turn() -> None:
    """GPU warm-ups alternate between the devices: the caches they fill serve whichever device takes the row."""
    from cudal1.evaluator.schedule import submit_builds

    problems = [fixture_problem(s) for s in ("scale_shift", "relu", "min_clamp")]
    ordered = [(p.problem_id, [Candidate(p.problem_id, fallback_program(f"warm_{i}", "int f();"))])
               for i, p in enumerate(problems)]
    pool = RecordingPool()
    builds = submit_builds(pool, ordered, {p.problem_id: p for p in problems}, EvalConfig(device="cuda:0"),
                           ["cuda:0", "cuda:1"], Path("/nonexistent"))
    assert len(builds) == 3 and pool.devices == ["cuda:0", "cuda:1", "cuda:0"], pool.devices


def test_one_rule_says_which_programs_compile_for_builds_workers_and_fork_servers(tmp_path: Path) -> None:
    """A program that reaches torch.compile's machinery through torch._dynamo gets a GPU warm-up build as
    a torch.compile program does (its worker already made torch.compile's start): the build schedule and
    the worker read one rule. A CPU batch warms up none of them."""
    from cudal1.evaluator.probes import uses_compile
    from cudal1.evaluator.schedule import submit_builds

    problem = fixture_problem("scale_shift")
    plain = problem.source.replace("class Model(", "class ModelNew(")
    sources = {"plain": plain, "compile": plain + "\nfast = torch.compile(ModelNew)\n",
               "dynamo": "import torch._dynamo\n" + plain, "inductor": plain + "\nimport torch._inductor.config\n"}
    ordered = [(problem.problem_id, [Candidate(problem.problem_id, s, origin=o) for o, s in sources.items()])]
    for config, expected in ((EvalConfig(device="cuda:0"), ["compile", "dynamo", "inductor"]), (EvalConfig(device="cpu"), [])):
        pool = RecordingPool()
        submit_builds(pool, ordered, {problem.problem_id: problem}, config, [config.device], Path("/nonexistent"))
        assert pool.built == expected, (config.device, pool.built)
    for origin, source in sources.items():
        (tmp_path / f"{origin}.py").write_text(source)
        assert uses_compile(str(tmp_path / f"{origin}.py")) == (origin != "plain"), origin
