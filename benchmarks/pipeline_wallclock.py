"""Wall clock of the default pipeline from a fresh clone: `python -m flows.pipeline` twice in a new copy
of the repository (the second run should find every stage up to date).

    .venv/bin/python benchmarks/pipeline_wallclock.py [--clone] [--keep] [--json out.json]

By default the copy holds what `git ls-files` lists, committed or not (what the next commit will hold);
``--clone`` makes it a plain `git clone` of the last commit. The copy gets its own Prefect home, so the
first run also pays for creating Prefect's database, as on a new machine. The environment (the venv)
is this interpreter's: the figure is "after set-up", as `make run` measures it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OFFLINE = {"DVC_NO_ANALYTICS": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "MLFLOW_DISABLE_TELEMETRY": "true",
           "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}
GIT = ["git", "-c", "user.name=benchmark", "-c", "user.email=benchmark@cudal1.invalid"]


def fresh_copy(dest: Path, clone: bool) -> Path:
    if clone:
        subprocess.run(["git", "clone", "-q", str(REPO), str(dest)], check=True)
        return dest
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        if (REPO / rel).is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, dest / rel)
    subprocess.run([*GIT, "init", "-q"], cwd=dest, check=True)
    subprocess.run([*GIT, "add", "-A"], cwd=dest, check=True)
    subprocess.run([*GIT, "commit", "-qm", "benchmark copy"], cwd=dest, check=True)
    return dest


def timed_run(repo: Path, env: dict[str, str], log: Path) -> tuple[float, int]:
    started = time.monotonic()
    with log.open("w") as out:
        code = subprocess.run([sys.executable, "-m", "flows.pipeline"], cwd=repo, env=env, stdout=out,
                              stderr=subprocess.STDOUT).returncode
    return time.monotonic() - started, code


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clone", action="store_true", help="git clone the last commit instead of copying the tree")
    parser.add_argument("--keep", action="store_true", help="keep the copy (its path is printed)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="cudal1-wallclock-"))
    repo = fresh_copy(work / "repo", args.clone)
    env = os.environ | OFFLINE | {"PREFECT_HOME": str(work / "prefect-home"),
                                  "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    for key in ("PREFECT_API_URL", "MLFLOW_TRACKING_URI"):
        env.pop(key, None)  # the defaults: a temporary Prefect server, MLflow's SQLite file in the copy
    first, code1 = timed_run(repo, env, work / "first.log")
    second, code2 = timed_run(repo, env, work / "second.log")
    metrics_path = repo / "reports" / "metrics.json"
    metrics = json.loads(metrics_path.read_text()) if metrics_path.is_file() else {}
    figures = {
        "first_run_s": round(first, 1), "second_run_s": round(second, 1), "exit_codes": [code1, code2],
        "cpus": os.cpu_count(), "machine": platform.processor() or platform.machine(),
        "python": platform.python_version(), "overall": metrics.get("overall"), "statuses": metrics.get("statuses"),
        "logs": [str(work / "first.log"), str(work / "second.log")] if args.keep else [],
    }
    print(f"first run (every stage):  {first:7.1f} s  exit {code1}")
    print(f"second run (nothing new): {second:7.1f} s  exit {code2}")
    print(json.dumps(figures, indent=2))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    if args.keep:
        print(f"kept: {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(0 if code1 == code2 == 0 else 1)


if __name__ == "__main__":
    main()
