"""A params overlay merged over params.yaml: the committed GPU overlay validates and reaches every stage's
section; CUDA devices this machine lacks stop the pipeline, the stages and the commands at once, naming the
device and the fix."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from pipeline_helpers import REPO

from cudal1.config import SECTIONS, load_params, merge
from cudal1.devices import DeviceUnavailable, check_devices
from flows import pipeline
from flows._common import OVERLAY_ENV, stage_params

GPU_OVERLAY = REPO / "configs" / "gpu-real-model.yaml"
TINY_OVERLAY = REPO / "configs" / "gpu-tiny-policy.yaml"
EVALUATING = ("augment", "evaluate", "self_supervised", "contrastive_rl", "gate")


@pytest.fixture
def gpu_repo(tmp_path: Path) -> Path:
    """params.yaml and the GPU overlay in a folder whose ../shared holds the files the overlay names (empty:
    loading params checks that they exist, not what they hold)."""
    repo = tmp_path / "repo"
    (repo / "configs").mkdir(parents=True)
    shutil.copy(REPO / "params.yaml", repo / "params.yaml")
    shutil.copy(GPU_OVERLAY, repo / "configs" / GPU_OVERLAY.name)
    shutil.copy(TINY_OVERLAY, repo / "configs" / TINY_OVERLAY.name)
    for name in ("kernelbench/problems.jsonl", "cuda-l1/h100.jsonl"):
        (tmp_path / "shared" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "shared" / name).write_text("")
    return repo


def test_the_tiny_policy_overlay_stacks_over_the_gpu_overlay(gpu_repo: Path) -> None:
    """configs/gpu-tiny-policy.yaml over gpu-real-model.yaml: the recipe's problems, teachers, devices and
    protocol stay; the policy is the tiny one, fine-tuned whole, with positions for the longest SFT row."""
    overlays = [gpu_repo / "configs" / GPU_OVERLAY.name, gpu_repo / "configs" / TINY_OVERLAY.name]
    both = {s: load_params(gpu_repo / "params.yaml", s, overlays) for s in SECTIONS}
    real = {s: load_params(gpu_repo / "params.yaml", s, overlays[0]) for s in SECTIONS}
    assert both["policy"].is_tiny and both["policy"].max_positions >= both["sft"].max_length
    for section in ("sft", "contrastive_rl"):
        assert not both[section].lora and not both[section].gradient_checkpointing, section
    assert not both["self_supervised"].finetune.lora
    for section in ("problems", "augment", "evaluate", "gate"):
        assert both[section] == real[section], section
    for section in ("self_supervised", "contrastive_rl"):
        assert both[section].devices == real[section].devices and both[section].protocol == real[section].protocol
    assert both["contrastive_rl"].epochs == real["contrastive_rl"].epochs >= 5


def test_the_gpu_overlay_validates_and_reaches_every_stage(gpu_repo: Path) -> None:
    overlay = gpu_repo / "configs" / GPU_OVERLAY.name
    params = {s: load_params(gpu_repo / "params.yaml", s, overlay) for s in SECTIONS}
    plain = {s: load_params(gpu_repo / "params.yaml", s) for s in SECTIONS}
    shared = gpu_repo.parent / "shared"
    assert params["policy"].model != "tiny" and not params["policy"].is_tiny
    (suite,) = params["problems"].suites
    assert (suite.kind, Path(suite.path).resolve(), suite.levels) == (
        "kernelbench_jsonl", (shared / "kernelbench/problems.jsonl").resolve(), (1, 2))
    assert len(params["problems"].ids) == 20
    (teacher,) = params["augment"].file_teachers
    assert Path(teacher.path).resolve() == (shared / "cuda-l1/h100.jsonl").resolve()  # against params.yaml's folder
    template = params["augment"].template  # the two rewrites that matter on a GPU; what it leaves keeps its value
    assert template.variants == ("no_grad", "cuda_graph") and template.compile_modes == plain["augment"].template.compile_modes
    assert params["augment"].protocol == plain["augment"].protocol
    for section in EVALUATING:
        assert params[section].devices == ("cuda:0",), section
    assert params["sft"].lora and params["sft"].gradient_checkpointing and params["contrastive_rl"].lora
    assert params["self_supervised"].rounds >= 2 and params["contrastive_rl"].epochs >= 5
    full = params["evaluate"].protocol
    for section in ("self_supervised", "contrastive_rl"):  # the full protocol, not the CPU's light one
        light = plain[section].protocol
        assert params[section].protocol.hash == full.hash != light.hash, section
    assert params["contrastive_rl"].max_new_tokens > plain["contrastive_rl"].max_new_tokens
    assert not params["contrastive_rl"].use_vllm  # vLLM cannot share the pipeline's environment
    changed = {s for s in SECTIONS if params[s] != plain[s]}
    assert changed == set(SECTIONS) - {"cross_gpu"}, changed


def test_an_overlay_merges_mappings_and_replaces_the_rest(tmp_path: Path) -> None:
    (tmp_path / "params.yaml").write_text("sft: {epochs: 3, lora: false}\nproblems: {ids: [a, b]}\n")
    (tmp_path / "over.yaml").write_text("sft: {lora: true}\nproblems: {ids: [c]}\n")
    sft = load_params(tmp_path / "params.yaml", "sft", tmp_path / "over.yaml")
    assert (sft.epochs, sft.lora) == (3, True)
    assert load_params(tmp_path / "params.yaml", "problems", tmp_path / "over.yaml").ids == ("c",)
    assert merge({"a": {"b": 1}}, {"a": 2}) == {"a": 2}


def test_an_overlay_mistake_names_the_key(tmp_path: Path) -> None:
    from cudal1.config import ParamsError

    (tmp_path / "params.yaml").write_text("sft: {epochs: 3}\n")
    (tmp_path / "over.yaml").write_text("sft: {epoch: 4}\n")
    with pytest.raises(ParamsError, match="sft.epoch: unknown key"):
        load_params(tmp_path / "params.yaml", "sft", tmp_path / "over.yaml")
    with pytest.raises(ParamsError, match="--params-overlay"):
        load_params(tmp_path / "params.yaml", "sft", tmp_path / "missing.yaml")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU build's answer")
def test_a_cuda_device_stops_every_stage_and_the_pipeline_at_once(gpu_repo: Path, monkeypatch) -> None:
    monkeypatch.setenv(OVERLAY_ENV, str(gpu_repo / "configs" / GPU_OVERLAY.name))
    for section in EVALUATING:
        with pytest.raises(DeviceUnavailable, match=rf"^{section}\.devices: cuda:0 asked for, but this torch .* "
                                                    r"CPU build .*docs/guides/gpu\.md"):
            stage_params(gpu_repo / "params.yaml", section)
    assert stage_params(gpu_repo / "params.yaml", "sft").lora  # a section without devices loads
    with pytest.raises(DeviceUnavailable, match="augment.devices: cuda:0"):
        pipeline.check_params(str(gpu_repo / "params.yaml"))


def test_a_cuda_index_beyond_the_visible_gpus(monkeypatch) -> None:
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    check_devices(["cpu", "cuda:0", "cuda:1"], "gate.devices")
    with pytest.raises(DeviceUnavailable, match=r"gate.devices: cuda:2 asked for, but torch sees 2 GPUs "
                                                r"\(cuda:0, cuda:1\); use one of those"):
        check_devices(["cuda:2"], "gate.devices")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(DeviceUnavailable, match="sees no GPU: check the driver"):
        check_devices(["cuda"], "--device")


def test_the_pipeline_records_its_overlay_and_runs_everything_when_it_changes(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv(OVERLAY_ENV, raising=False)
    assert not pipeline.overlay_changed(tmp_path)  # no overlay, none before
    overlay = tmp_path / "over.yaml"
    overlay.write_text("sft: {epochs: 3}\n")
    monkeypatch.setenv(OVERLAY_ENV, str(overlay))
    assert pipeline.overlay_changed(tmp_path)
    pipeline.record_overlay(tmp_path)
    assert not pipeline.overlay_changed(tmp_path)
    overlay.write_text("sft: {epochs: 4}\n")
    assert pipeline.overlay_changed(tmp_path)  # same file, new content
    monkeypatch.delenv(OVERLAY_ENV)
    assert pipeline.overlay_changed(tmp_path)  # back to params.yaml alone


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU build's answer")
def test_the_pipeline_command_stops_before_prefect_or_dvc(gpu_repo: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "flows.pipeline", "--repo", str(gpu_repo), "--params-overlay",
                           str(gpu_repo / "configs" / GPU_OVERLAY.name)], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: augment.devices: cuda:0 asked for") and "Traceback" not in done.stderr
    assert not (gpu_repo / "data").exists()  # nothing ran, nothing was recorded


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU build's answer")
@pytest.mark.parametrize("command", [
    ["evaluate-one", "--reference", "ref.py", "--candidate", "ref.py", "--device", "cuda:0"],
    ["evaluate", "--problems", "starter", "--candidates", "ref.py", "--out", "out.parquet", "--devices", "cpu,cuda:0"],
    ["optimize", "ref.py", "--device", "cuda:0"],
], ids=lambda c: c[0])
def test_a_cuda_device_ends_each_command_at_once_with_the_fix(command: list[str], tmp_path: Path) -> None:
    (tmp_path / "ref.py").write_text((REPO / "tests/fixtures/evalone/ref.py").read_text())
    done = subprocess.run([sys.executable, "-m", "cudal1.cli", *command], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2
    text = " ".join(done.stderr.replace("│", " ").split())
    assert "cuda:0 asked for, but this torch" in text and "Install a CUDA build of torch" in text, text
    assert "Traceback" not in done.stderr and not (tmp_path / "ref-optimized").exists()
