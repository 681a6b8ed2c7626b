"""A torch.compile program whose graph no build cached compiles in the timed worker, after the worker's
snapshot of its threads: torch's compile helpers (a thread pool, a tqdm monitor) must not start there and
be blamed on the program (L3-35/37's torch.compile baselines were rejected for "python_threads: 1 -> 2")."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

REFERENCE = textwrap.dedent('''
    import torch
    class Model(torch.nn.Module):
        def forward(self, x):
            return torch.relu(x) * 2.0 + 1.0
    def get_inputs():
        return [torch.randn(64, 64)]
    def get_init_inputs():
        return []
''')

# A constant from the process id: a graph no cache holds, so this process compiles it.
CANDIDATE = textwrap.dedent('''
    import os
    import torch
    class ModelNew(torch.nn.Module):
        def __init__(self):
            super().__init__()
            bump = (os.getpid() % 997) * 1e-9
            self.f = torch.compile(lambda x: torch.relu(x) * 2.0 + (1.0 + bump))
        def forward(self, x):
            return self.f(x)
''')

DRIVER = textwrap.dedent('''
    import json, sys, threading
    from cudal1.evaluator import worker as w
    if sys.argv[3] == "old":  # the worker as it was: torch's compile helpers left as they are
        w.probes.compile_without_threads = lambda: None
    worker = w.Worker("cpu", 1, flush_l2=False)
    reply = worker.load({"role": "candidate", "reference_path": sys.argv[1], "candidate_path": sys.argv[2],
                         "init_seed": 0})
    worker.run({"seed": 1, "out_path": sys.argv[4]})
    print(json.dumps({"ok": reply["ok"], "changed": worker.violations()["changed"]}))
''')


# Both tests read one inductor cache, warmed once: the warm-up graph is the same for both, and a cold
# inductor compile of it takes seconds of CPU. Each candidate's graph is new to the cache whatever it holds.
pytestmark = pytest.mark.xdist_group("compile-threads")


@pytest.fixture(scope="module")
def inductor_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    home = tmp_path_factory.mktemp("compile-threads")
    env = {"PATH": "/usr/bin:/bin", "TORCHINDUCTOR_CACHE_DIR": str(home / "inductor"),
           "TORCHINDUCTOR_COMPILE_THREADS": "2", "HOME": str(home)}
    # As in a pool, the worker's own warm-up graph is cached already (the builds and the fork server ran it)
    subprocess.run([sys.executable, "-c", "import torch; torch.compile(lambda x: x + 1)(torch.ones(1))"],
                   env=env, check=True, capture_output=True, timeout=300)
    yield env


def _violations(tmp_path: Path, env: dict[str, str], mode: str) -> dict:
    (tmp_path / "reference.py").write_text(REFERENCE)
    (tmp_path / "candidate.py").write_text(CANDIDATE)
    out = subprocess.run([sys.executable, "-c", DRIVER, str(tmp_path / "reference.py"), str(tmp_path / "candidate.py"),
                          mode, str(tmp_path / "out.pt")], capture_output=True, text=True, timeout=300,
                         cwd=Path(__file__).resolve().parents[1], env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # a torch.compile in a fresh worker, about 40 s: `make test` runs it, the fast tier does not
def test_a_fresh_compile_in_the_timed_worker_starts_no_thread(tmp_path: Path, inductor_env: dict[str, str]) -> None:
    result = _violations(tmp_path, inductor_env, "new")
    assert result["ok"] and result["changed"] == []


@pytest.mark.slow  # a torch.compile in a fresh worker, about 40 s: `make test` runs it, the fast tier does not
def test_without_the_setting_torch_starts_threads_that_would_be_blamed(tmp_path: Path,
                                                                      inductor_env: dict[str, str]) -> None:
    """The check above can fail: with torch's defaults the same load changes the thread count."""
    result = _violations(tmp_path, inductor_env, "old")
    assert any(c.startswith("python_threads") and "(new: " in c for c in result["changed"]), result
