"""The whole DAG as one flow: check every params section, ask DVC what is stale, run ``dvc repro``.

DVC decides what runs (a stage re-runs only when its code, params keys or inputs changed), so a new
stage in dvc.yaml needs no change here. The stages run as ``dvc repro`` subprocesses that report to
this flow's Prefect API and log MLflow runs nested under this flow's MLflow run.

    python -m flows.pipeline [STAGE ...] [--force] [--repo DIR] [--params-overlay FILE]

With an overlay every stage reads params.yaml with the overlay merged over it; DVC tracks params.yaml's
values only, so a run whose overlay (or its absence) differs from the last run's re-runs every stage.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from cudal1.config import SECTIONS, AugmentParams, load_params
from cudal1.exiting import skip_final_collection
from flows._common import USER_ERRORS, overlay_path, stage_params, use_overlay
from tasks.tracking import PARENT_RUN_ENV, stage_run


def check_params(params_path: str) -> list[str]:
    """Load every section this code knows, with the run's overlay, so a mistake stops the run before DVC
    deletes any output (and a misspelt key, which DVC does not track, is not silently ignored); a CUDA
    device this machine lacks stops it too."""
    from cudal1.config import ParamsError, read_document

    if not Path(params_path).is_file():
        raise ParamsError(f"{params_path}: no params file; run from the repository root or pass --repo DIR")
    present = read_document(params_path, overlay_path())
    checked = [name for name in SECTIONS if name in present]
    for name in checked:
        stage_params(params_path, name)
    return checked


def overlay_changed(root: Path) -> bool:
    """Whether the overlay (its path and content; or none) differs from the last finished run's. DVC tracks
    params.yaml's values, not an overlay's: a changed overlay re-runs every stage (``--force``)."""
    return _overlay_state() != _last_overlay(root)


def _overlay_state() -> dict[str, str] | None:
    import hashlib

    path = overlay_path()
    if not path:
        return None
    return {"path": path, "sha256": hashlib.sha256(Path(path).read_bytes()).hexdigest()}


def _last_overlay(root: Path) -> dict[str, str] | None:
    record = root / OVERLAY_RECORD
    return json.loads(record.read_text()).get("overlay") if record.is_file() else None


def record_overlay(root: Path) -> None:
    record = root / OVERLAY_RECORD
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps({"overlay": _overlay_state()}) + "\n")


# Which overlay the outputs in the workspace were made with: beside the resumable state, outside DVC's outs.
OVERLAY_RECORD = Path("data/cache/params-overlay.json")


@task(cache_policy=NO_CACHE)
def check_params_task(params_path: str) -> list[str]:
    return check_params(params_path)


def default_target(root: str | Path) -> str:
    """The default pipeline's stages: its dvc.yaml, as a bare ``dvc repro`` there runs. Not every stage of
    the repository: reproduction/dvc.yaml is a pipeline of its own (it needs the CUDA-L1 release)."""
    return str(Path(root).resolve() / "dvc.yaml")


@contextlib.contextmanager
def _dvc_repo(root: str) -> Iterator[Any]:
    """The DVC repository at ``root``, opened from inside it: DVC reads a target (a stage name, an output
    path) against the working directory, so a `--repo` given from elsewhere would name nothing."""
    from dvc.repo import Repo

    with contextlib.chdir(root), Repo(".") as repo:
        yield repo


@task(cache_policy=NO_CACHE)
def stages_to_run_task(root: str, targets: list[str], force: bool) -> list[str]:
    """Stages whose code, params or data changed (`dvc status`), plus everything downstream of them,
    which re-runs as soon as their inputs change. With ``force``: every stage of the targets."""
    import networkx as nx

    with _dvc_repo(root) as repo, repo.lock:
        graph = repo.index.graph
        wanted = {s for t in (targets or [default_target(".")]) for s in repo.stage.collect(t, with_deps=True)}
        changed = wanted if force else {s for s in wanted if s.changed()}
        names = set()
        for stage in changed:
            names |= {s.addressing for s in nx.dfs_postorder_nodes(graph.reverse(), stage) if s in wanted}
    return sorted(names)


@task(cache_policy=NO_CACHE)
def check_teachers_task(params_path: str) -> int:
    from cudal1.generation.teachers import OpenAITeacher

    params: AugmentParams = load_params(params_path, "augment", overlay_path())
    for i, teacher in enumerate(params.teachers):
        warning = OpenAITeacher(teacher, f"augment.teachers[{i}]").check()
        if warning:
            get_run_logger().warning(warning)
    return len(params.teachers)


def _child_env(parent_run_id: str) -> dict[str, str]:
    """The stages reuse this flow's Prefect API (no second temporary server), nest their MLflow runs
    under ours, and find this interpreter's `python` and `dvc` first on PATH."""
    from prefect.client.orchestration import get_client

    env = dict(os.environ)
    with get_client(sync_client=True) as client:
        env["PREFECT_API_URL"] = str(client.api_url).rstrip("/")
    env[PARENT_RUN_ENV] = parent_run_id
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return env


def clear_corrupt_rwlock(root: Path, settle_s: float = 0.5) -> bool:
    """Remove DVC's ``.dvc/tmp/rwlock`` when it is not JSON: a ``dvc repro`` stopped while writing it
    (Ctrl-C, a killed worker) leaves it empty, and every later ``dvc repro`` then fails with
    RWLockFileCorruptedError until someone deletes it by hand (treeverse/dvc#7615). It is read twice,
    ``settle_s`` apart, so a write in progress by a running DVC is left alone. True where it was removed.
    """
    path = root / ".dvc" / "tmp" / "rwlock"
    for attempt in range(2):
        try:
            json.loads(path.read_text())
            return False  # readable JSON (an empty object once DVC is idle): DVC's own to manage
        except FileNotFoundError:
            return False
        except (ValueError, OSError):
            if attempt == 0:
                time.sleep(settle_s)
    path.unlink(missing_ok=True)
    return True


# A line the stage's own Prefect logger printed: that flow run already sent it to the API.
_PREFECT_LINE = re.compile(r"^\d\d:\d\d:\d\d\.\d{3} \| ")


@task(cache_policy=NO_CACHE)
def dvc_repro_task(root: str, targets: list[str], force: bool, env: dict[str, str]) -> None:
    """``dvc repro``. A terminal sees the stages' own output and progress bars; otherwise (a worker,
    CI) the output is passed through and DVC's own lines also go to this flow's log (the stages' log
    lines reach the API from their own flow runs). No retries: a failed stage fails the same way again."""
    logger = get_run_logger()
    if clear_corrupt_rwlock(Path(root)):
        logger.warning(".dvc/tmp/rwlock was not readable (a dvc repro stopped while writing it): removed")
    cmd = [sys.executable, "-m", "dvc", "repro", *targets, *(["--force"] if force else [])]
    logger.info("$ " + " ".join(cmd[2:]))
    if sys.stdout.isatty():
        code, tail = subprocess.run(cmd, cwd=root, env=env).returncode, "(see the output above)"
    else:
        proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines: deque[str] = deque(maxlen=30)
        for line in proc.stdout or ():
            print(line, end="", flush=True)
            lines.append(line.rstrip())
            if line.strip() and not _PREFECT_LINE.match(line):
                logger.info(line.rstrip())
        code, tail = proc.wait(), "\n".join(lines)
    if code != 0:
        raise RuntimeError(f"dvc repro failed (exit {code}); nothing after the failed stage ran, and outputs of "
                           f"earlier stages are kept (restore any with `dvc checkout`). Last output:\n{tail}")


def _run_name() -> str:
    from prefect.runtime import flow_run

    p = flow_run.parameters
    what = " ".join(p.get("targets") or []) or "all stages"
    return f"pipeline: dvc repro {what}{' --force' if p.get('force') else ''}"


@flow(name="pipeline", flow_run_name=_run_name)
def pipeline_flow(repo: str = ".", targets: list[str] | None = None, force: bool = False) -> list[str]:
    root = Path(repo).resolve()
    params_path = str(root / "params.yaml")
    targets = list(targets or [])
    logger = get_run_logger()
    sections = check_params_task(params_path)
    logger.info(f"params.yaml: sections {', '.join(sections)} are valid")
    stages = stages_to_run_task(str(root), targets, force)
    if not stages:
        logger.info("DVC: every stage is up to date; nothing to run")
        return []
    logger.info(f"DVC will run: {', '.join(stages)}")
    if "augment" in stages:
        check_teachers_task(params_path)
    params = {"targets": targets or ["all"], "force": force, "stages": stages}
    with stage_run("pipeline", params, root, run_name=_run_name()) as run:
        dvc_repro_task(str(root), targets, force, _child_env(run.run_id))
        metrics = root / "reports" / "metrics.json"
        if metrics.is_file():
            run.log_metrics(json.loads(metrics.read_text()))
        gate = root / "reports" / "gate.json"
        if "gate" in stages and gate.is_file():  # the retraining's outcome, in this run's log and metrics
            decision = json.loads(gate.read_text())
            run.log_metrics(decision)
            logger.info(f"gate: {'promoted' if decision['gate']['promoted'] else 'kept out'} the new policy version "
                        "(its figures: reports/gate.json; `cudal1 models` lists the versions)")
        run.log_artifacts([root / "dvc.lock", root / "params.yaml", root / "reports" / "report.md"])
    return stages


def _up_to_date(repo: str, targets: list[str]) -> bool:
    try:
        with _dvc_repo(repo) as dvc_repo:
            # with_deps: a target is stale when a stage it depends on is (`dvc repro` runs that one too)
            return not dvc_repo.status(targets or [default_target(".")], with_deps=True)
    except Exception:  # no dvc.lock yet, a broken dvc.yaml...: let the flow run and report it
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("targets", nargs="*", help="stages to reproduce (default: all)")
    parser.add_argument("--force", action="store_true", help="re-run the stages even when nothing changed")
    parser.add_argument("--repo", default=".", help="repository root holding dvc.yaml and params.yaml")
    parser.add_argument("--params-overlay", default=None, metavar="FILE",
                        help="a YAML file merged over params.yaml for every stage, e.g. configs/gpu-real-model.yaml")
    args = parser.parse_args()
    try:
        use_overlay(args.params_overlay)  # the stages dvc repro starts inherit it
        check_params(str(Path(args.repo) / "params.yaml"))
        force = args.force or overlay_changed(Path(args.repo))
        if force and not args.force:
            print("the params overlay differs from the last run's (DVC does not track it): every stage runs again")
        if not force and _up_to_date(args.repo, args.targets):
            # Starting Prefect costs more than the answer: a no-op `make run` returns in seconds.
            print("DVC: every stage is up to date; nothing to run (use --force to run anyway)")
            return
        pipeline_flow(repo=args.repo, targets=args.targets, force=force)
        if not args.targets:  # every stage now reflects this overlay
            record_overlay(Path(args.repo))
    except USER_ERRORS as exc:
        print(f"\nerror: {exc}", file=sys.stderr)
        sys.exit(2)
    except RuntimeError as exc:
        print(f"\nerror: {exc}", file=sys.stderr)
        sys.exit(1)
    finally:
        skip_final_collection()


if __name__ == "__main__":
    main()
