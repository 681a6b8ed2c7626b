"""Screenshot of the MLflow UI comparing the contrastive_rl runs of a checkout (docs/images/mlflow-compare.png).

Starts `mlflow server` on the checkout's store (a free loopback port, no background job workers), opens the
runs-comparison page in headless Chromium and saves a PNG; stops the server it started.

    apt-get install chromium     # Debian's package; any Chromium or Chrome binary works (--browser)
    .venv/bin/python benchmarks/mlflow_screenshot.py --repo . --out docs/images/mlflow-compare.png
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def compare_url(base: str, repo: Path, stage: str, experiment: str) -> str:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{repo.resolve() / 'mlruns.db'}")
    found = client.get_experiment_by_name(experiment)
    if found is None:
        sys.exit(f"no experiment {experiment!r} in {repo}/mlruns.db: run the pipeline first")
    runs = client.search_runs([found.experiment_id], f"tags.stage = '{stage}'", order_by=["start_time ASC"])
    if len(runs) < 2:
        sys.exit(f"{len(runs)} {stage} run(s): a comparison needs two (e.g. `dvc exp run -S {stage}.seed=1`)")
    ids = json.dumps([r.info.run_id for r in runs[-4:]])
    query = urllib.parse.urlencode({"runs": ids, "experiments": json.dumps([found.experiment_id])})
    return f"{base}/#/compare-runs?{query}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repo", type=Path, default=Path("."), help="checkout holding mlruns.db and mlartifacts/")
    parser.add_argument("--out", type=Path, default=Path("docs/images/mlflow-compare.png"))
    parser.add_argument("--stage", default="contrastive_rl", help="compare this stage's runs (the last four)")
    parser.add_argument("--experiment", default="cudal1")
    parser.add_argument("--browser", default=shutil.which("chromium") or shutil.which("chromium-browser") or "chromium")
    parser.add_argument("--size", default="1600,1600", help="window width,height in pixels")
    args = parser.parse_args()
    repo = args.repo.resolve()
    port = free_port()
    env = os.environ | {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "MLFLOW_DISABLE_TELEMETRY": "true"}
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "mlflow"), "server", "--backend-store-uri", f"sqlite:///{repo / 'mlruns.db'}",
         "--default-artifact-root", (repo / "mlartifacts").as_uri(), "--host", "127.0.0.1", "--port", str(port),
         "--workers", "1"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 90
        while True:
            try:
                urllib.request.urlopen(f"{base}/health", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    sys.exit("mlflow server did not answer /health within 90 s")
                time.sleep(0.5)
        url = compare_url(base, repo, args.stage, args.experiment)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="cudal1-chromium-") as profile:
            # virtual-time-budget lets the single-page app fetch the runs and draw before the capture.
            subprocess.run([args.browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                            f"--user-data-dir={profile}", f"--window-size={args.size}", "--virtual-time-budget=20000",
                            f"--screenshot={args.out.resolve()}", url], check=True, timeout=180,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        print(f"{url}\n-> {args.out}")
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
