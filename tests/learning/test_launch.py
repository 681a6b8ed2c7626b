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


def test_one_process_that_sees_several_gpus_is_refused_with_the_ways_out(monkeypatch):
    """TRL's trainers stop deep in a stage when one process sees several GPUs (learning_gpu.py did on a
    two-GPU H200 host); the stage says so first and names the two ways out. This machine has no GPU, so
    torch's own answers are replaced: only the rule is under test here."""
    import torch

    from cudal1.training import finetune

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(RuntimeError, match=r"2 GPUs are visible.*CUDA_VISIBLE_DEVICES=0.*accelerate launch -m cudal1.training.launch"):
        finetune.device_kwargs()
    monkeypatch.setenv("WORLD_SIZE", "2")  # started by accelerate launch or torchrun: one GPU each
    assert finetune.device_kwargs() == {}
    monkeypatch.delenv("WORLD_SIZE")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert finetune.device_kwargs() == finetune.device_kwargs("auto") == {}  # the trainer's own default on a GPU
    assert finetune.device_kwargs("fp32") == {"bf16": False, "fp16": False}
    assert finetune.device_kwargs("bf16") == {"bf16": True}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert finetune.device_kwargs() == {"use_cpu": True, "bf16": False}
