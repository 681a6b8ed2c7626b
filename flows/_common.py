"""What every stage flow shares: where the repository is, run names, and the command line.

Every stage flow reads the same way: ``params = load_params(params_path, stage)`` (which resolves the
section's relative paths against the params file's folder, the one place they are resolved), ``root =
repo_root(params_path)`` for the MLflow store, then tasks that take the params section (and ``root`` when
they log to MLflow themselves) and use its paths as they come."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cudal1.config import ParamsError
from cudal1.exiting import skip_final_collection
from cudal1.generation.teachers import TeacherUnavailable
from cudal1.problems import ProblemLoadError

# Mistakes in the user's settings or inputs: reported as one message, not as a traceback.
USER_ERRORS = (ParamsError, ProblemLoadError, TeacherUnavailable)


def repo_root(params_path: str | Path) -> Path:
    """The params file sits at the repository root; MLflow's store and relative paths hang off it."""
    return Path(params_path).resolve().parent


def run_name(stage: str, describe: Callable[[Any], str]) -> Callable[[], str]:
    """A ``flow_run_name`` callable: ``<stage>: <what the params select>``, read from the params file
    the run was given (a broken file still gets a name; the flow itself reports the error)."""

    def name() -> str:
        from prefect.runtime import flow_run

        from cudal1.config import load_params

        path = flow_run.parameters.get("params_path", "params.yaml")
        try:
            return f"{stage}: {describe(load_params(path, stage))}"
        except Exception:  # the flow's own load reports the problem with its full message
            return f"{stage}: {path}"

    return name


def policy_label(params_path: str | Path) -> str:
    """The base model of the learning stages, for run names: ``tiny 4x256`` or the hub id / folder."""
    from cudal1.config import load_params

    try:
        p = load_params(params_path, "policy")
    except ParamsError:
        return "policy"
    return f"tiny {p.layers}x{p.hidden}" if p.is_tiny else str(p.model)


def teachers_label(template: bool, names: list[str]) -> str:
    """Who wrote the candidates of augment/evaluate, for run names: ``template + gpt``."""
    return " + ".join((["template"] if template else []) + names) or "no teachers"


def main(flow: Callable[..., Any], description: str) -> None:
    """``python -m flows.<stage> [--params PATH]``: run the flow; a settings mistake exits 2 with its
    message on the last line, where a person (or DVC's log) sees it first."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--params", default="params.yaml", help="params file (default: ./params.yaml)")
    args = parser.parse_args()
    try:
        flow(params_path=args.params)
    except USER_ERRORS as exc:
        print(f"\nerror: {exc}", file=sys.stderr)
        sys.exit(2)
    finally:
        skip_final_collection()
