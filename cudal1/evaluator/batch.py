"""Many candidates: builds in parallel on the CPU cores while each device times one candidate at a
time; results appended to a parquet file as they finish, so an interrupted batch resumes where it
stopped (a candidate already measured under the same config on the same hardware is skipped)."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import replace
from pathlib import Path

from cudal1.candidates import Candidate, Evaluation, Status, load_evaluations, save_evaluations
from cudal1.evaluator.config import EvalConfig
from cudal1.evaluator.core import (
    ReferenceError,
    ReferenceSession,
    default_extensions_root,
    device_name,
    evaluate_candidate,
    module_file,
    prepare_candidate_worker,
)
from cudal1.evaluator.process import WorkerFailure, WorkerProcess, WorkerSpec
from cudal1.evaluator.static import check_source
from cudal1.problems import Problem

Progress = Callable[[Evaluation], None]


def _needs_build(source: str) -> bool:
    return "load_inline" in source or "cpp_extension" in source


def prebuild(problem: Problem, candidate: Candidate, config: EvalConfig, extensions_root: Path) -> str:
    """Build (import and construct) a candidate once in a throwaway worker so its extension lands in
    the shared cache keyed by the source hash; returns an error message or ''. Failures are left for
    the timed evaluation to report: it rebuilds, fails the same way and records the verdict."""
    root = Path(tempfile.mkdtemp(prefix="cudal1-build-"))
    # A build worker runs the candidate's module and constructs it on the CPU: the harness puts nothing on
    # the GPU another candidate is being timed on. The GPUs stay visible, because CUDA-L1's programs
    # compile only when torch.cuda.is_available() (measured: hiding them left 15-30 s builds on the timed
    # path); a program that moves itself to the GPU in __init__ fails here after its build is cached and
    # is loaded normally when its turn comes. TORCH_CUDA_ARCH_LIST is fixed by evaluate_many so both
    # compile the same thing.
    spec = WorkerSpec("cpu", config.cpu_threads, 0, flush_l2=False, nice=19,
                      extensions_dir=extensions_root / candidate.sha256[:16])
    try:
        root.chmod(0o711)
        work = root / "w"
        work.mkdir(mode=0o700)
        (work / "candidate.py").write_text(candidate.source)
        (work / "reference.py").write_text(problem.source)
        with WorkerProcess(spec, work, "build") as worker:
            worker.wait_ready(config.load_timeout_s)
            reply = worker.call({"cmd": "load", "role": "candidate", "reference_path": str(work / "reference.py"),
                                 "candidate_path": str(work / "candidate.py"), "init_seed": 0,
                                 "module_file": module_file(worker)},
                                config.build_timeout_s + config.load_timeout_s)
            return "" if reply.get("ok") else str(reply.get("error", "failed"))
    except WorkerFailure as exc:
        return exc.message
    finally:
        shutil.rmtree(root, ignore_errors=True)


def pin_cuda_arch(devices: Sequence[str]) -> None:
    """Fix TORCH_CUDA_ARCH_LIST (workers inherit it) to the devices' compute capabilities, unless the user
    set it: a build worker that sees no GPU then compiles exactly what the timed worker would, and both
    hit the same cached build."""
    import torch

    if os.environ.get("TORCH_CUDA_ARCH_LIST") or not torch.cuda.is_available():
        return
    caps = sorted({torch.cuda.get_device_capability(int(d.split(":")[1]) if ":" in d else 0) for d in devices})
    os.environ["TORCH_CUDA_ARCH_LIST"] = ";".join(f"{major}.{minor}" for major, minor in caps)


class _Sink:
    """Thread-safe result collection, rewritten atomically to parquet after every evaluation."""

    def __init__(self, path: Path | None, existing: list[Evaluation], progress: Progress | None) -> None:
        self.path, self.rows, self.progress = path, list(existing), progress
        self.new: list[Evaluation] = []
        self.lock = threading.Lock()

    def add(self, evaluation: Evaluation) -> None:
        with self.lock:
            self.rows.append(evaluation)
            self.new.append(evaluation)
            if self.path is not None:
                tmp = self.path.with_name(self.path.name + ".partial" + self.path.suffix)
                save_evaluations(self.rows, tmp)
                os.replace(tmp, self.path)
        if self.progress is not None:
            self.progress(evaluation)


def _recheck(first: Evaluation, problem: Problem, candidate: Candidate, config: EvalConfig,
             devices: Sequence[str], device: str, ext_root: Path) -> Evaluation:
    """CUDA-L1's guard against lucky or hacked outliers: measure again in fresh processes, on another
    device when there is one, and reject when the two disagree by more than the tolerance."""
    other = next((d for d in devices if d != device), device)
    second = evaluate_candidate(problem, candidate, config.with_device(other), extensions_root=ext_root)
    if not second.ok or second.speedup is None or first.speedup is None:
        return replace(first, status=second.status if not second.ok else Status.REJECTED,
                       reason=f"re-measurement on {other} failed: {second.reason}", speedup=None)
    gap = abs(first.speedup - second.speedup) / first.speedup
    extra = first.extra | {"recheck_device": other, "recheck_speedup": second.speedup}
    if gap > config.recheck_limit:
        return replace(first, status=Status.REJECTED, speedup=None, extra=extra,
                       reason=f"speedup {first.speedup:.2f}x not reproduced: {second.speedup:.2f}x on {other} "
                              f"({gap:.0%} apart, limit {config.recheck_limit:.0%})")
    keep = min((first, second), key=lambda e: e.speedup or 0.0)  # the conservative of the two
    return replace(keep, extra=extra, flags=tuple(sorted(set(first.flags) | set(second.flags) | {"rechecked"})))


def evaluate_many(
    problems: Sequence[Problem],
    candidates: Sequence[Candidate],
    config: EvalConfig,
    devices: Sequence[str] | None = None,
    results_path: str | Path | None = None,
    progress: Progress | None = None,
    *,
    build_workers: int | None = None,
    extensions_root: Path | None = None,
) -> list[Evaluation]:
    """Evaluate candidates against their problems on one or more devices; returns the new evaluations
    (with results_path, the file holds the earlier ones too)."""
    by_id = {p.problem_id: p for p in problems}
    unknown = sorted({c.problem_id for c in candidates} - set(by_id))
    if unknown:
        raise ValueError(f"candidates name problems that are not loaded: {unknown[:5]}; load the suite they came from")
    devices = list(devices or [config.device])
    path = Path(results_path) if results_path is not None else None
    existing = load_evaluations(path) if path is not None else []
    done = {e.key for e in existing}
    ext_root = extensions_root or default_extensions_root()
    if config.is_cuda:
        pin_cuda_arch(devices)
    todo = [c for c in candidates
            if (by_id[c.problem_id].sha256, c.sha256, config.hash, device_name(devices[0])) not in done]
    sink = _Sink(path, existing, progress)
    if not todo:
        return []
    # Builds in submission order on all cores but those the timing path needs (the parent and the two
    # workers of each device), at the lowest CPU priority, overlapping the timing of what needs no build.
    workers = build_workers or max(1, (os.cpu_count() or 2) - 1 - 2 * len(devices))
    builds: dict[str, Future[str]] = {}
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for c in todo:
            if _needs_build(c.source) and c.sha256 not in builds and not check_source(c.source).rejected:
                builds[c.sha256] = pool.submit(prebuild, by_id[c.problem_id], c, config.with_device(devices[0]), ext_root)
        order: dict[str, list[Candidate]] = {}
        for c in todo:
            order.setdefault(c.problem_id, []).append(c)
        groups = _Groups([(by_id[pid], cands) for pid, cands in order.items()], builds)
        threads = [threading.Thread(target=_device_loop, args=(d, groups, builds, config, devices, ext_root, sink),
                                    name=f"cudal1-eval-{d}", daemon=True) for d in devices]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return sink.new


class _Groups:
    """Problems waiting for a device, ready ones first: a group whose candidates need no build (or whose
    builds are done) is timed while others still compile, instead of the device idling behind a build."""

    def __init__(self, groups: list[tuple[Problem, list[Candidate]]], builds: dict[str, Future[str]]) -> None:
        self.groups, self.builds, self.lock = list(groups), builds, threading.Lock()

    def _ready(self, cands: list[Candidate]) -> bool:
        return all(c.sha256 not in self.builds or self.builds[c.sha256].done() for c in cands)

    def take(self, block: bool = True) -> tuple[Problem, list[Candidate]] | None:
        """The first ready group; without ``block``, None when none is ready yet. None when all are taken."""
        while True:
            with self.lock:
                if not self.groups:
                    return None
                for i, (_problem, cands) in enumerate(self.groups):
                    if self._ready(cands):
                        return self.groups.pop(i)
                pending = [self.builds[c.sha256] for _p, cands in self.groups for c in cands
                           if c.sha256 in self.builds and not self.builds[c.sha256].done()]
            if not block:
                return None
            wait(pending, timeout=1.0, return_when=FIRST_COMPLETED)


def _device_loop(device: str, groups: _Groups, builds: dict[str, Future[str]], config: EvalConfig,
                 devices: Sequence[str], ext_root: Path, sink: _Sink) -> None:
    """One device, one candidate timed at a time. The next problem's reference worker and the next
    candidate's worker start while the current candidate is measured, so interpreter, torch and CUDA
    start-up stay off the critical path."""
    cfg = config.with_device(device)

    def start_reference(problem: Problem) -> ReferenceSession | str:
        try:
            return ReferenceSession(problem, cfg, load=False)  # built when its turn comes, not during a timing
        except (ReferenceError, WorkerFailure) as exc:
            return str(exc)

    def next_group(block: bool) -> tuple[Problem, list[Candidate], Future] | None:
        taken = groups.take(block)
        if taken is None:
            return None
        return taken[0], taken[1], starter.submit(start_reference, taken[0])

    with ThreadPoolExecutor(max_workers=1) as starter:
        current = next_group(block=True)
        prepared: WorkerProcess | None = None
        while current is not None:
            problem, cands, session_future = current
            upcoming = next_group(block=False)  # prestarted only if one is ready now
            session = session_future.result()
            if not isinstance(session, str):
                try:
                    session.load()
                except ReferenceError as exc:
                    session = str(exc)
            if isinstance(session, str):
                for c in cands:
                    sink.add(_reference_failed(problem, c, cfg, session))
                current = upcoming if upcoming is not None else next_group(block=True)
                continue
            with session:
                for i, c in enumerate(cands):
                    if c.sha256 in builds:
                        builds[c.sha256].result()
                    worker = prepared or prepare_candidate_worker(problem, c, cfg, ext_root)
                    following = (problem, cands[i + 1]) if i + 1 < len(cands) else \
                        ((upcoming[0], upcoming[1][0]) if upcoming is not None else None)
                    prepared = None
                    if following is not None and (following[1].sha256 not in builds or builds[following[1].sha256].done()):
                        prepared = prepare_candidate_worker(following[0], following[1], cfg, ext_root)
                    try:
                        result = evaluate_candidate(problem, c, cfg, reference=session, extensions_root=ext_root,
                                                    prepared=worker)
                    except ReferenceError as exc:
                        result = _reference_failed(problem, c, cfg, str(exc))
                    if result.ok and cfg.recheck_above is not None and (result.speedup or 0) > cfg.recheck_above:
                        result = _recheck(result, problem, c, cfg, devices, device, ext_root)
                    sink.add(result)
            current = upcoming if upcoming is not None else next_group(block=True)
        if prepared is not None:
            prepared.close()
            shutil.rmtree(prepared.workdir.parent, ignore_errors=True)


def _reference_failed(problem: Problem, c: Candidate, cfg: EvalConfig, message: str) -> Evaluation:
    return Evaluation(problem.problem_id, c.candidate_id, Status.RUNTIME_ERROR, reason=f"reference failed: {message}",
                      flags=("reference_failed",), device=cfg.device, device_name=device_name(cfg.device),
                      config_hash=cfg.hash, problem_sha256=problem.sha256, candidate_sha256=c.sha256)
