"""The batch's device queue: problems whose candidates need no build (or whose builds are done) are
handed out first, so a device never idles behind a compile while other work is ready."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future

from cudal1.candidates import Candidate
from cudal1.evaluator.batch import _Groups
from cudal1.problems import Problem


def _group(pid: str) -> tuple[Problem, list[Candidate]]:
    return Problem(pid, 1, pid, "x"), [Candidate(pid, f"# {pid}\n")]


def test_ready_groups_first_then_waits_for_builds() -> None:
    slow, fast = _group("needs-build"), _group("plain")
    build: Future[str] = Future()
    groups = _Groups([slow, fast], {slow[1][0].sha256: build})
    assert groups.take()[0].problem_id == "plain"  # type: ignore[index]
    assert groups.take(block=False) is None  # only the unbuilt one is left: not ready yet
    threading.Timer(0.3, build.set_result, args=("",)).start()
    started = time.perf_counter()
    assert groups.take()[0].problem_id == "needs-build"  # type: ignore[index]
    assert time.perf_counter() - started >= 0.2  # it waited for the build instead of spinning past it
    assert groups.take() is None and groups.take(block=False) is None


def test_order_is_kept_among_ready_groups() -> None:
    names = [f"p{i}" for i in range(5)]
    groups = _Groups([_group(n) for n in names], {})
    assert [groups.take()[0].problem_id for _ in names] == names  # type: ignore[index]
