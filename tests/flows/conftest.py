"""Shared fixtures for the pipeline tests: a real local Prefect server, copies of the repository with
reduced params, and helpers to run the flows as the user does (``python -m flows.<name>``).

Everything is real: the Prefect server is ``prefect server start``, the stages run through ``dvc repro``,
MLflow writes its SQLite store inside each copy, and the evaluator measures on this CPU. The server is
started once per test run, shared by every xdist worker (tests/conftest.py); each copy of the repository
is its own git + DVC project.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from pipeline_helpers import (
    REDUCED,
    VENV_BIN,
    copy_repo,
    edit_params,
    free_port,
    run_pipeline,
    stop,
    wait_http,
)

from cudal1.problems import load_starter_suite


@pytest.fixture(scope="session")
def run_env(prefect_server: str, prefect_home: Path) -> dict[str, str]:
    """The environment of every command the tests run: our server, no telemetry, this venv first."""
    env = dict(os.environ)
    for key in ("MLFLOW_TRACKING_URI", "CUDAL1_MLFLOW_PARENT_RUN_ID"):
        env.pop(key, None)
    return env | {
        "PREFECT_API_URL": prefect_server, "PREFECT_HOME": str(prefect_home),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DVC_NO_ANALYTICS": "1", "MLFLOW_DISABLE_TELEMETRY": "true",
        "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
        "PATH": f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}", "PYTHONUNBUFFERED": "1",
        "PREFECT_LOGGING_TO_API_ENABLED": "false",  # no test reads a run's logs from the API (tests/servers.py)
    }


@pytest.fixture(scope="session")
def pipeline_repo(tmp_path_factory: pytest.TempPathFactory, run_env: dict[str, str]) -> dict[str, Any]:
    """A copy of the repository with the reduced params, after one full `python -m flows.pipeline`."""
    repo = copy_repo(tmp_path_factory.mktemp("pipeline-repo"))
    edit_params(repo, REDUCED)
    started = time.monotonic()
    result = run_pipeline(repo, run_env)
    return {"repo": repo, "result": result, "seconds": time.monotonic() - started}


@pytest.fixture(scope="session")
def tiny_server(tmp_path_factory: pytest.TempPathFactory):
    """`transformers serve` on a free port, serving a tiny Llama whose tokenizer was trained here; shared by
    every test that needs a real OpenAI-compatible endpoint (teachers, `cudal1 optimize`)."""
    from cudal1.generation.tiny_policy import build_tiny_policy

    root = tmp_path_factory.mktemp("tiny-server")
    model = build_tiny_policy(root / "model", [p.source for p in load_starter_suite()], vocab_size=512, hidden=64,
                              layers=2, max_positions=4096)
    port = free_port()
    env = os.environ | {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HUB_CACHE": str(root / "hub")}
    log = (root / "serve.log").open("w")
    proc = subprocess.Popen([str(VENV_BIN / "transformers"), "serve", "--host", "127.0.0.1", "--port", str(port),
                             str(model)], env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_http(f"http://127.0.0.1:{port}/health", 180, proc)
        yield {"base_url": f"http://127.0.0.1:{port}/v1", "model": str(model)}
    finally:
        stop(proc)
        log.close()
