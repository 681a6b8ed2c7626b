"""Prefect flows, one per DVC stage, plus the pipeline that drives ``dvc repro``.

Importing this package sets the offline defaults (no analytics, no telemetry, no hub downloads) before
Prefect, MLflow or DVC load, so ``python -m flows.<stage>`` behaves like ``make run``; a variable
already set in the environment wins.
"""

import os

OFFLINE_DEFAULTS = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
    "DVC_NO_ANALYTICS": "1",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "DO_NOT_TRACK": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}

for _key, _value in OFFLINE_DEFAULTS.items():
    os.environ.setdefault(_key, _value)
