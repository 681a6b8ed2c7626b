"""Which tests must share an xdist worker, and the scheduler that keeps them together.

Some fixtures build something expensive once and hand it to several tests, which then run in file order on
its state (``pipeline_repo`` runs the whole reduced pipeline; ``xg_repo`` starts Prefect workers). Spread
over workers, each worker would build its own copy and the order would be lost. So each such test gets a
group, and one group is one unit of work for the scheduler: it goes to one worker, in collection order.

pytest-xdist's own ``--dist loadgroup`` passes ``xdist_group`` marks to the controller by appending them to
the test's node id, which pytest 9.2 no longer allows: the groups are silently dropped (pytest-xdist issue
1386). Here the workers write their groups to a file in the test run's folder (tests/servers.py) when they
collect, and the controller's scheduler reads it. ``xdist_group`` marks are honoured the same way.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.servers import run_dir

# Session-scoped: one group for all their users. Module-scoped: one group per module (each builds its own).
SHARED_SESSION_FIXTURES = ("pipeline_repo", "tiny_server")
SHARED_MODULE_FIXTURES = ("xg_repo", "tiny_project")


def group_of(item: pytest.Item) -> str | None:
    names = {str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in item.iter_markers("xdist_group")}
    used = set(getattr(item, "fixturenames", ()))
    names |= used.intersection(SHARED_SESSION_FIXTURES)
    names |= {f"{name}:{item.nodeid.split('::')[0]}" for name in used.intersection(SHARED_MODULE_FIXTURES)}
    return "+".join(sorted(names)) or None


def _groups_file(worker: str) -> Path:
    return run_dir() / f"groups-{worker}.json"


def record_groups(items: list[pytest.Item]) -> None:
    """In an xdist worker: write {node id: group} before the collection is reported to the controller."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        return
    groups = {item.nodeid: group for item in items if (group := group_of(item)) is not None}
    path = _groups_file(worker)
    path.with_suffix(".tmp").write_text(json.dumps(groups))
    path.with_suffix(".tmp").replace(path)  # the controller never reads half a file


def make_scheduler(config: pytest.Config, log: Any) -> Any:
    """The scheduler for ``--dist loadgroup``; None leaves any other mode to xdist."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SharedFixtureScheduling(LoadScopeScheduling):
        """LoadScope whose scopes are the groups above; every other test is a scope of its own."""

        groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.groups is None:  # first called once every worker has collected (and written its file)
                self.groups = {}
                for path in sorted(run_dir().glob("groups-*.json")):
                    self.groups.update(json.loads(path.read_text()))
            # (an xdist that appends the group to the node id again: look the id up without it too)
            return self.groups.get(nodeid) or self.groups.get(nodeid.rsplit("@", 1)[0]) or nodeid

    return SharedFixtureScheduling(config, log)
