"""The quick start as a new user meets it: clone this repository into a temporary folder and time `make run`,
`make check` and `make test` there, in that order (the first pays for the set-up: the venv and its
packages), then write results/fresh-clone/result.json (cudal1/measured.py). From the repository root:

    .venv/bin/python benchmarks/fresh_clone.py [--no-run] [--no-check] [--no-test] [--out results/fresh-clone]
    .venv/bin/python benchmarks/fresh_clone.py --dry-run      # the commands it would run; writes nothing

The clone is of the last commit (commit first what you want measured). It sits beside a link to this
checkout's ../shared, so that the tests that read the KernelBench and CUDA-L1 files run as they do here, and
gets a Prefect home of its own, as a new machine would. The pytest figures come from pytest's own summary
line ("N passed ... in S s"); a target that fails writes no result. Figures of a target not run are null.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from cudal1.measured import Figure, git_commit, pytest_summary, this_machine, write_result  # noqa: E402

TARGETS = ("run", "check", "test")


def figures_from(walls: dict[str, float], logs: dict[str, str]) -> dict[str, Figure]:
    """The result's figures from each target's wall (s) and its output; those of a target not run are None.

    >>> f = figures_from({"run": 264.04, "check": 171.2}, {"check": "... 412 passed, 3 skipped in 150.31s (0:02:30)"})
    >>> f["make_run_s"], f["make_check_s"], f["check_pytest_s"], f["check_passed"], f["make_test_s"], f["test_passed"]
    (264.0, 171.2, 150.31, 412, None, None)
    """
    figures: dict[str, Figure] = {f"make_{t}_s": round(walls[t], 1) if t in walls else None for t in TARGETS}
    for target in ("check", "test"):
        summary = pytest_summary(logs[target]) if target in logs else None
        figures[f"{target}_pytest_s"] = summary["seconds"] if summary else None
        figures[f"{target}_passed"] = summary["passed"] if summary else None
    return {k: figures[k] for k in ("make_run_s", "make_check_s", "check_pytest_s", "check_passed", "make_test_s",
                                    "test_pytest_s", "test_passed")}


def environment(work: Path) -> dict[str, str]:
    """This environment as a new machine would have it: its own Prefect home, the default stores."""
    env = os.environ | {"PREFECT_HOME": str(work / "prefect-home")}
    for key in ("PREFECT_API_URL", "MLFLOW_TRACKING_URI", "VIRTUAL_ENV", "PYTHONPATH"):
        env.pop(key, None)
    return env


def clone(work: Path) -> Path:
    """A clone of this repository's last commit in ``work``, beside a link to ../shared where it exists."""
    dest = work / "cudal1"
    subprocess.run(["git", "clone", "-q", str(REPO), str(dest)], check=True)
    if (REPO.parent / "shared").exists():
        (work / "shared").symlink_to(REPO.parent / "shared")
    return dest


def timed(make: str, target: str, repo: Path, env: dict[str, str], log: Path) -> tuple[float, int]:
    started = time.monotonic()
    with log.open("w") as out:
        code = subprocess.run([*shlex.split(make), target], cwd=repo, env=env, stdout=out,
                              stderr=subprocess.STDOUT).returncode
    return time.monotonic() - started, code


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for target in TARGETS:
        ap.add_argument(f"--no-{target}", action="store_true", help=f"do not time `make {target}`")
    ap.add_argument("--out", type=Path, default=REPO / "results" / "fresh-clone")
    ap.add_argument("--make", default="make", help="the make to run (the tests give a stand-in)")
    ap.add_argument("--keep", action="store_true", help="keep the clone and its logs (the path is printed)")
    ap.add_argument("--dry-run", action="store_true", help="print the commands it would run; write nothing")
    args = ap.parse_args(argv)
    targets = [t for t in TARGETS if not getattr(args, f"no_{t}")]
    if args.dry_run:
        print(f"git clone -q {REPO} TMP/cudal1" + (f" && ln -s {REPO.parent / 'shared'} TMP/shared"
                                                  if (REPO.parent / "shared").exists() else ""))
        for target in targets:
            print(f"cd TMP/cudal1 && PREFECT_HOME=TMP/prefect-home {args.make} {target} > TMP/make-{target}.log")
        print(f"-> {args.out / 'result.json'}")
        return 0
    work = Path(tempfile.mkdtemp(prefix="cudal1-fresh-clone-"))
    try:
        return measure(work, targets, args)
    finally:
        if args.keep:
            print(f"kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def measure(work: Path, targets: list[str], args: argparse.Namespace) -> int:
    """Each target timed in a clone under ``work``, then the result written; 1 where a target failed."""
    repo, env = clone(work), environment(work)
    commit = git_commit(repo)  # the tree as cloned: `make run` rewrites a stale dvc.lock in it
    walls, logs = {}, {}
    for target in targets:
        wall, code = timed(args.make, target, repo, env, work / f"make-{target}.log")
        logs[target] = (work / f"make-{target}.log").read_text()
        print(f"make {target}: {wall:.1f} s, exit {code}", flush=True)
        if code != 0:
            print(logs[target][-3000:], file=sys.stderr)
            print(f"`make {target}` failed: no result written (--keep keeps the clone)", file=sys.stderr)
            return 1
        walls[target] = wall
    figures = figures_from(walls, logs)
    command = "python benchmarks/fresh_clone.py" + "".join(f" --no-{t}" for t in TARGETS if t not in targets)
    path = write_result(args.out, title="A fresh clone's `make run`, `make check` and `make test`", command=command,
                        hardware=this_machine(), figures=figures, commit=commit,
                        notes="Each in a new clone, in that order: the first target timed pays for the set-up. "
                              "The pytest figures are pytest's own summary line.")
    print(path, figures)
    return 0

if __name__ == "__main__":
    sys.exit(main())
