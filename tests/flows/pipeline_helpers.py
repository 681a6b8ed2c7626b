"""Helpers for the pipeline tests: free ports, process control, repository copies, params edits."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent

# The reduced run: three problems, the cheapest rewrites, two timing trials.
REDUCED = {
    "problems": {"limit": 3},
    "augment": {"template": {"variants": ["baseline", "no_grad"]},
                "protocol": {"correctness_trials": 2, "timing_trials": 2, "target_trial_ms": 10.0}},
    "evaluate": {"protocol": {"correctness_trials": 2, "timing_trials": 2, "target_trial_ms": 10.0}},
    "gate": {"protocol": {"correctness_trials": 2, "timing_trials": 2, "target_trial_ms": 10.0}},
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, timeout_s: float, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process for {url} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"{url} did not answer within {timeout_s:.0f} s")


def stop(proc: subprocess.Popen, signals: tuple[int, ...] = (signal.SIGTERM,)) -> None:
    """Stop a process these tests started (by its id), escalating to SIGKILL."""
    for sig in signals:
        if proc.poll() is None:
            proc.send_signal(sig)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                continue
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=10)


def deep_merge(base: dict, changes: dict) -> dict:
    out = dict(base)
    for key, value in changes.items():
        out[key] = deep_merge(out.get(key) or {}, value) if isinstance(value, dict) else value
    return out


def edit_params(repo: Path, changes: dict) -> None:
    path = repo / "params.yaml"
    path.write_text(yaml.safe_dump(deep_merge(yaml.safe_load(path.read_text()), changes), sort_keys=False))


def copy_repo(dest: Path) -> Path:
    """What a fresh clone would hold, including work not committed yet: tracked files plus untracked,
    non-ignored ones. The copy becomes its own git repository (DVC needs one)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=REPO, capture_output=True, check=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src = REPO / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    git = ["git", "-c", "user.name=cudal1-tests", "-c", "user.email=tests@cudal1.invalid"]
    subprocess.run([*git, "init", "-q"], cwd=dest, check=True)
    subprocess.run([*git, "add", "-A"], cwd=dest, check=True)
    subprocess.run([*git, "commit", "-qm", "copy"], cwd=dest, check=True)
    return dest


def run(cmd: list[str], repo: Path, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=timeout)


def run_pipeline(repo: Path, env: dict[str, str], *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return run([sys.executable, "-m", "flows.pipeline", *args], repo, env, timeout)
