"""Settings validation and their way into TRL's config (no training here)."""

from __future__ import annotations

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
