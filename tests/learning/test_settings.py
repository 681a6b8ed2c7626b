"""Settings validation and their way into TRL's config (no training here)."""

from __future__ import annotations

import re

import pytest

from cudal1.training.rl import grpo_config
from cudal1.training.settings import PromptSettings, RLSettings


def test_admission_margin_must_not_be_negative():
    assert PromptSettings(admit="improving", admit_margin=0.15).admit_margin == 0.15
    with pytest.raises(ValueError, match="admit_margin"):
        PromptSettings(admit_margin=-0.1)


@pytest.mark.parametrize("quantile", [0.0, 1.5])
def test_entropy_quantile_is_a_fraction(quantile):
    with pytest.raises(ValueError, match="top_entropy_quantile"):
        RLSettings(top_entropy_quantile=quantile)


def test_grpo_config_carries_the_rl_settings(tmp_path):
    settings = RLSettings(num_generations=4, prompts_per_step=5, iterations=2, top_entropy_quantile=0.2,
                          learning_rate=3e-4, temperature=0.7, max_new_tokens=64)
    args = grpo_config(settings, tmp_path, epoch=1, n_prompts=15)
    assert args.top_entropy_quantile == 0.2 and args.num_iterations == 2
    assert args.per_device_train_batch_size == 5 * 4 and args.steps_per_generation == 3  # 15 prompts, 3 steps
    assert args.learning_rate == 3e-4 and args.temperature == 0.7 and args.max_completion_length == 64
    assert args.seed == settings.seed + 1  # each epoch samples afresh
    assert args.cache_implementation == "static"  # on this CPU: decoding writes its cache in place (backends.cpu_cache)


def test_a_new_exemplar_changes_only_its_own_problems_prompt():
    from dataclasses import replace

    from cudal1.pool import CandidatePool, PoolEntry
    from cudal1.problems import Problem
    from cudal1.training.rl import epoch_prompts

    problems = {pid: Problem(pid, 1, pid, f"class Model:  # {pid}\n    pass\n") for pid in ("a", "b", "c")}

    def entry(pid: str, i: int, speedup: float) -> PoolEntry:
        return PoolEntry(pid, f"{pid}{i}", f"{pid}{i:063x}", f"class ModelNew:  # {pid} {i}\n    pass\n",
                         "test", "ok", speedup)

    pool = CandidatePool([entry(pid, i, 1.0 + 0.3 * i) for pid in problems for i in range(4)])
    settings = RLSettings(redraw_exemplars=False, prompts=PromptSettings(exemplars=2, bucket_width=0.1))
    before = {r["problem_id"]: r["prompt"] for r in epoch_prompts(problems, pool, settings, epoch=0)}
    pool.add(entry("a", 9, 3.0))
    after = {r["problem_id"]: r["prompt"] for r in epoch_prompts(problems, pool, settings, epoch=1)}
    assert after["b"] == before["b"] and after["c"] == before["c"]  # same draw: their pools did not change
    redrawn = replace(settings, redraw_exemplars=True)
    assert len({epoch_prompts(problems, pool, redrawn, epoch=e)[1]["prompt"] for e in range(8)}) > 1


def test_without_redrawn_samples_every_epoch_samples_with_one_seed(tmp_path):
    # The trainer seeds generation with args.seed: one seed for all epochs gives a frozen policy the same
    # completions every epoch, so an epoch's change in success rate is the policy's change.
    settings = RLSettings(seed=3, redraw_samples=False)
    assert {grpo_config(settings, tmp_path, epoch=e, n_prompts=15).seed for e in range(3)} == {3}


@pytest.mark.parametrize("section, expected", [
    ("use_vllm: true\n  vllm_mode: server\n  vllm_server_host: 10.0.0.7\n  vllm_server_port: 8123\n",
     {"use_vllm": True, "vllm_mode": "server", "vllm_server_host": "10.0.0.7", "vllm_server_port": 8123}),
    ("use_vllm: true\n  vllm_mode: colocate\n  vllm_gpu_memory_utilization: 0.45\n",
     {"use_vllm": True, "vllm_mode": "colocate", "vllm_gpu_memory_utilization": 0.45}),
    ("seed: 0\n", {"use_vllm": False}),  # the default: model.generate, as on CPU
])
def test_vllm_settings_in_params_reach_the_grpo_config(tmp_path, section, expected):
    from cudal1.config import load_params

    path = tmp_path / "params.yaml"
    path.write_text(f"contrastive_rl:\n  {section}")
    args = grpo_config(load_params(path, "contrastive_rl"), tmp_path, epoch=0, n_prompts=10)
    assert {k: getattr(args, k) for k in expected} == expected


def test_the_repository_params_keep_vllm_off():
    from pathlib import Path

    from cudal1.config import load_params

    params = load_params(Path(__file__).resolve().parents[2] / "params.yaml", "contrastive_rl")
    assert params.use_vllm is False and params.vllm_mode == "server"


@pytest.mark.parametrize("line, message", [
    ("vllm_mode: remote", "contrastive_rl.vllm_mode: expected one of 'server', 'colocate'"),
    ("vllm_server_port: 0", "vllm_server_port=0: use the port of `trl vllm-serve --port`"),
    ("vllm_server_host: ''", "vllm_server_host is empty"),
    ("vllm_gpu_memory_utilization: 1.5", "vllm_gpu_memory_utilization=1.5: use the fraction"),
])
def test_a_wrong_vllm_setting_is_named_with_its_fix(tmp_path, line, message):
    from cudal1.config import ParamsError, load_params

    path = tmp_path / "params.yaml"
    path.write_text(f"contrastive_rl:\n  {line}\n")
    with pytest.raises(ParamsError, match=re.escape(message)):
        load_params(path, "contrastive_rl")


def test_vllm_on_a_machine_without_it_stops_before_the_first_epoch():
    import importlib.util

    import torch

    from cudal1.training.rl import check_vllm

    check_vllm(RLSettings())  # off: nothing to check
    if importlib.util.find_spec("vllm") is not None and torch.cuda.is_available():
        pytest.skip("vllm and a GPU are both here: nothing is missing")
    with pytest.raises(RuntimeError, match="use_vllm is true but (vllm is not installed|no CUDA GPU)"):
        check_vllm(RLSettings(use_vllm=True))
