"""Helpers for the pipeline tests: free ports, process control, repository copies, params edits."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

from tests.servers import VENV_BIN, free_port, stop, wait_http  # noqa: F401 - the flow tests import them from here

REPO = Path(__file__).resolve().parents[2]

# The reduced run: three problems, the cheapest rewrites, two timing trials, and learning stages the size
# of tests/learning's (a one-layer policy, a few short epochs and completions): every stage runs for real,
# in seconds rather than minutes.
REDUCED = {
    "problems": {"limit": 3},
    "augment": {"template": {"variants": ["baseline", "no_grad"]},
                "protocol": {"correctness_trials": 2, "timing_trials": 2, "target_trial_ms": 10.0}},
    "evaluate": {"protocol": {"correctness_trials": 2, "timing_trials": 2, "target_trial_ms": 10.0}},
    "policy": {"vocab_size": 1024, "hidden": 64, "layers": 1},
    "sft": {"epochs": 3, "learning_rate": 0.003, "copies": 1, "prompts": {"exemplars": 1}},
    # one round: the rounds' iteration is tested by tests/learning/test_stages.py on a smaller project
    "self_supervised": {"rounds": 1, "copies": 1, "sampling": {"samples": 2, "max_new_tokens": 48},
                        "finetune": {"epochs": 1}, "prompts": {"exemplars": 1}},
    "contrastive_rl": {"epochs": 1, "num_generations": 2, "prompts_per_step": 3, "max_new_tokens": 48,
                       "prompts": {"exemplars": 1}},
    "gate": {"protocol": {"correctness_trials": 2, "timing_trials": 2, "target_trial_ms": 10.0}},
}


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


def deploy(repo: Path, env: dict[str, str], *names: str, attempts: int = 3) -> subprocess.CompletedProcess:
    """``prefect deploy --name ...`` for each of ``names``, tried again while the shared test server answers
    503: its one SQLite file, written to by every test worker's flows, stayed busy past the client's own
    five retries once in a fresh-clone CI run (tests/flows/test_cross_gpu.py's fixture). A deployment is
    upserted by name, so a second try repeats nothing."""
    cmd = [str(VENV_BIN / "prefect"), "--no-prompt", "deploy", *(a for n in names for a in ("--name", n))]
    for attempt in range(attempts):
        done = run(cmd, repo, env)
        if done.returncode == 0 or "503 Service Unavailable" not in done.stdout + done.stderr:
            return done
        time.sleep(5 * (attempt + 1))
    return done


def run_pipeline(repo: Path, env: dict[str, str], *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return run([sys.executable, "-m", "flows.pipeline", *args], repo, env, timeout)
