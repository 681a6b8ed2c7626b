"""What every stage flow shares: where the repository is, its params, run names, and the command line.

Every stage flow reads the same way: ``params = stage_params(params_path, stage)`` (``load_params`` with
the run's overlay, which resolves the section's relative paths against the params file's folder, the one
place they are resolved; its devices checked against this machine), ``root = repo_root(params_path)`` for
the MLflow store, then tasks that take the params section (and ``root`` when they log to MLflow themselves)
and use its paths as they come.

An overlay (``--params-overlay FILE``, e.g. configs/gpu-real-model.yaml) is merged over params.yaml before
validation. It reaches the stages that ``dvc repro`` starts through the environment variable
``CUDAL1_PARAMS_OVERLAY``, which the pipeline sets for them; this module is the one place that reads it."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cudal1.config import ParamsError, load_params
from cudal1.devices import DeviceUnavailable, check_devices
from cudal1.exiting import skip_final_collection
from cudal1.generation.files import ProgramFileError
from cudal1.generation.teachers import TeacherUnavailable
from cudal1.problems import ProblemLoadError

# Mistakes in the user's settings or inputs: reported as one message, not as a traceback.
USER_ERRORS = (ParamsError, ProblemLoadError, TeacherUnavailable, DeviceUnavailable, ProgramFileError)

OVERLAY_ENV = "CUDAL1_PARAMS_OVERLAY"  # a params overlay merged over params.yaml (absolute path)


def overlay_path() -> str | None:
    """The run's params overlay, or None."""
    return os.environ.get(OVERLAY_ENV) or None


def use_overlay(path: str | Path | None) -> None:
    """Make ``path`` the overlay of this process and of the processes it starts (``dvc repro``'s stages)."""
    if path:
        os.environ[OVERLAY_ENV] = str(Path(path).resolve())


def stage_params(params_path: str | Path, section: str) -> Any:
    """The section, with the run's overlay merged in; a CUDA device this machine lacks stops here, before
    any work (not in a worker halfway through the stage)."""
    params = load_params(params_path, section, overlay_path())
    devices = getattr(params, "devices", None)
    if devices:
        check_devices(devices, f"{section}.devices")
    return params


def repo_root(params_path: str | Path) -> Path:
    """The params file sits at the repository root; MLflow's store and relative paths hang off it."""
    return Path(params_path).resolve().parent


def run_name(stage: str, describe: Callable[[Any], str]) -> Callable[[], str]:
    """A ``flow_run_name`` callable: ``<stage>: <what the params select>``, read from the params file
    the run was given (a broken file still gets a name; the flow itself reports the error)."""

    def name() -> str:
        from prefect.runtime import flow_run

        path = flow_run.parameters.get("params_path", "params.yaml")
        try:
            return f"{stage}: {describe(load_params(path, stage, overlay_path()))}"
        except Exception:  # the flow's own load reports the problem with its full message
            return f"{stage}: {path}"

    return name


def policy_label(params_path: str | Path) -> str:
    """The base model of the learning stages, for run names: ``tiny 4x256`` or the hub id / folder."""
    try:
        p = load_params(params_path, "policy", overlay_path())
    except ParamsError:
        return "policy"
    return f"tiny {p.layers}x{p.hidden}" if p.is_tiny else str(p.model)


def teachers_label(template: bool, names: list[str]) -> str:
    """Who wrote the candidates of augment/evaluate, for run names: ``template + gpt``."""
    return " + ".join((["template"] if template else []) + names) or "no teachers"


def main(flow: Callable[..., Any], description: str) -> None:
    """``python -m flows.<stage> [--params PATH] [--params-overlay FILE]``: run the flow; a settings mistake
    exits 2 with its message on the last line, where a person (or DVC's log) sees it first."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--params", default="params.yaml", help="params file (default: ./params.yaml)")
    parser.add_argument("--params-overlay", default=None,
                        help=f"a YAML file merged over the params (default: ${OVERLAY_ENV}, else none)")
    args = parser.parse_args()
    try:
        use_overlay(args.params_overlay)
        flow(params_path=args.params)
    except USER_ERRORS as exc:
        print(f"\nerror: {exc}", file=sys.stderr)
        sys.exit(2)
    finally:
        skip_final_collection()
