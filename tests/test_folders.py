"""Two sandboxed workers of one candidate share its build folder (cudal1/evaluator/sandbox.py): each takes
the folder at its start, and the other still writes there, in what was there before and in what the
other made since. On two H100s a re-check's second worker took the folder from the first, whose
torch.compile program then failed its first call with PermissionError (docs/gpu-runs.md at 88f971b, 2026-11-27-twin-folders).
The writes here are the workers' own (their `probe` command saves a tensor where it is told)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from cudal1.evaluator.process import WorkerProcess, WorkerSpec
from cudal1.evaluator.sandbox import GROUP_BASE, GROUP_SPAN, candidate_group, sandbox_available, take_tree

needs_sandbox = pytest.mark.skipif(not sandbox_available(), reason="sandboxed workers need root")


def _worker(ext_root: Path, name: str, folder: Path) -> WorkerProcess:
    worker = WorkerProcess(WorkerSpec(device="cpu", memory_limit_mb=4096, extensions_dir=folder), ext_root / name, "candidate")
    worker.wait_ready(120)
    return worker


def _writes(worker: WorkerProcess, path: Path) -> bool:
    reply = worker.call({"cmd": "probe", "out_path": str(path)}, 60)
    return bool(reply.get("ok")) and path.exists()


def _status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {k: v.strip() for k, _, v in (line.partition(":") for line in lines)}


def _as_worker(worker: WorkerProcess, action) -> None:  # noqa: ANN001 - a callable run with the worker's credentials
    """Run ``action`` in a child with exactly the worker's uid, gid, groups and umask (read from /proc)."""
    status = _status(worker.pid)
    uid, gid = int(status["Uid"].split()[0]), int(status["Gid"].split()[0])
    groups = [int(g) for g in status["Groups"].split()]
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setgroups(groups)
            os.setgid(gid)
            os.setuid(uid)
            os.umask(int(status["Umask"], 8))
            action()
            code = 0
        finally:
            os._exit(code)
    _, status_code = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status_code) == 0


@needs_sandbox
@pytest.mark.parametrize("forked", [True, False], ids=["forked", "started"])
def test_the_first_worker_still_writes_after_a_second_takes_the_folder(ext_root: Path, forked: bool,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    if not forked:  # started by subprocess.Popen, as where the fork server is unavailable
        monkeypatch.setenv("CUDAL1_FORK_WORKERS", "0")
    folder = ext_root / "ext" / "0123456789abcdef"
    (folder / "inductor").mkdir(parents=True)  # made before either worker, as a prebuild's caches are
    first = _worker(ext_root, "first", folder)
    try:
        assert _writes(first, folder / "inductor" / "first.pt")
        second = _worker(ext_root, "second", folder)  # the twin: takes the whole tree at its start
        try:
            assert second.uid != first.uid
            # in the folder, in a folder made before the second started, over a file the second wrote
            assert _writes(first, folder / "first-after.pt")
            assert _writes(first, folder / "inductor" / "again.pt")
            assert _writes(second, folder / "inductor" / "second.pt")
            assert _writes(first, folder / "inductor" / "second.pt")
            # in a folder the second makes after its start (Inductor's cache makes its subfolders as it goes)
            _as_worker(second, lambda: os.mkdir(folder / "inductor" / "zz"))
            assert _writes(first, folder / "inductor" / "zz" / "first.pt")
            assert _writes(second, folder / "inductor" / "zz" / "second.pt")
        finally:
            second.close()
    finally:
        first.close()


@needs_sandbox
def test_only_that_candidates_workers_are_in_its_group(ext_root: Path) -> None:
    mine, other = ext_root / "ext" / "aaaa", ext_root / "ext" / "bbbb"
    a = _worker(ext_root, "a", mine)
    try:
        b = _worker(ext_root, "b", other)
        try:
            assert candidate_group(mine) != candidate_group(other)
            assert all(GROUP_BASE <= candidate_group(p) < GROUP_BASE + GROUP_SPAN for p in (mine, other))
            assert mine.stat().st_gid == candidate_group(mine) and mine.stat().st_mode & stat.S_ISGID
            assert not _writes(b, mine / "intruder.pt")  # another candidate's worker: not in the group
            assert _writes(a, mine / "own.pt")
            # a worker's own directory stays its alone: no group beside its own, nothing group-writable
            assert a.workdir.stat().st_gid == a.uid and not a.workdir.stat().st_mode & stat.S_IWGRP
        finally:
            b.close()
    finally:
        a.close()


@needs_sandbox
def test_a_worker_without_a_build_folder_has_no_group(ext_root: Path) -> None:
    with WorkerProcess(WorkerSpec(device="cpu", memory_limit_mb=4096), ext_root / "w", "candidate") as worker:
        worker.wait_ready(120)
        assert _status(worker.pid)["Groups"] == ""
        assert _status(worker.pid)["Umask"] == "0022"


@pytest.mark.skipif(os.geteuid() != 0, reason="handing a folder over needs root")
def test_a_hard_link_left_in_a_folder_does_not_hand_over_its_file(ext_root: Path) -> None:
    """A worker that could link a file it does not own into its folder (a host without the kernel's
    protected_hardlinks; here root makes the link) would get that file at the next worker's start."""
    outside = ext_root / "parents-file"
    outside.write_text("the parent's")
    outside.chmod(0o600)
    folder = ext_root / "ext" / "cafe"
    (folder / "sub").mkdir(parents=True)
    os.link(outside, folder / "sub" / "link")
    (folder / "sub" / "own.o").write_text("built")
    take_tree(folder, 300_001, candidate_group(folder))
    assert outside.stat().st_uid == 0 and stat.S_IMODE(outside.stat().st_mode) == 0o600
    assert not (folder / "sub" / "link").exists() and outside.read_text() == "the parent's"
    assert (folder / "sub" / "own.o").stat().st_uid == 300_001
    assert (folder / "sub" / "own.o").stat().st_mode & stat.S_IWGRP
    assert (folder / "sub").stat().st_gid == candidate_group(folder)
