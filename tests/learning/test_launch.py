"""What runs on CPU of the multi-GPU path: the SFT core under ``accelerate launch`` with the CPU config
(one process). The GPU configs differ only in distributed_type / num_processes / DeepSpeed keys."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cudal1.generation.tiny_policy import build_tiny_policy
from cudal1.training.data import load_corpus, tokenizer_texts

REPO = Path(__file__).resolve().parents[2]


def test_accelerate_configs_parse():
    for config in (REPO / "configs/accelerate").glob("*.yaml"):
        data = yaml.safe_load(config.read_text())
        assert data["distributed_type"] in ("NO", "MULTI_GPU", "DEEPSPEED", "FSDP"), config.name
        assert data["num_processes"] >= 1


@pytest.mark.slow
def test_sft_under_accelerate_launch(tiny_project, problems):
    build_tiny_policy(tiny_project / "models/policy",
                      tokenizer_texts(problems, load_corpus(tiny_project / "data/augment/corpus.parquet")),
                      vocab_size=1024, hidden=64, layers=1)
    accelerate = Path(sys.executable).parent / "accelerate"
    env = os.environ | {"PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run([str(accelerate), "launch", "--config_file", str(REPO / "configs/accelerate/cpu.yaml"),
                           "-m", "cudal1.training.launch", "sft", "--params", str(tiny_project / "params.yaml")],
                          cwd=tiny_project, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "last_loss" in done.stdout
    assert (tiny_project / "models/sft/model.safetensors").exists()
