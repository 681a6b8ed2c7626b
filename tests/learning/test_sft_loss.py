"""The SFT stage's loss on a CPU (finetune.completion_head_trainer): the LM head runs only over the columns
that predict completion tokens, where TRL's fused head scores every position off the GPU. Same loss, same
gradients, same training: each step's loss and token accuracy match TRL's own on a tiny real Llama."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cudal1.generation.templates import template_source
from cudal1.generation.tiny_policy import build_tiny_policy
from cudal1.problems import load_starter_suite
from cudal1.training import finetune as ft
from cudal1.training.settings import FinetuneSettings


@pytest.fixture(scope="module")
def rows() -> list[dict[str, str]]:
    out = []
    for problem in load_starter_suite()[:4]:
        for variant in ("no_grad", "inference_mode"):
            # a long prompt, a short completion: the shape of a contrastive SFT example
            out.append({"prompt": f"Reference:\n{problem.source}\nWrite ModelNew ({variant}).\n",
                        "completion": template_source(problem, variant)[-300:]})
    return out


def _policy(tmp_path, rows) -> tuple:
    """A one-layer tiny policy (model, tokenizer) whose tokenizer learned the rows."""
    path = build_tiny_policy(tmp_path / "policy", [r["prompt"] + r["completion"] for r in rows],
                             vocab_size=512, hidden=64, layers=1)
    return ft.load_policy(path)


def _samples(model, tokenizer, rows, n: int = 2) -> list[str]:
    """``n`` sampled completions of the first row's prompt, through the static-cache CPU generation."""
    from cudal1.generation.backends import TransformersBackend

    (texts,) = TransformersBackend(model, tokenizer, device="cpu").generate([rows[0]["prompt"]], n, 8, 1.0)
    return texts


def _train(tmp_path, rows, trainer: type | None, monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    model, tokenizer = _policy(tmp_path, rows)
    if trainer is not None:
        monkeypatch.setattr(ft, "completion_head_trainer", lambda: trainer)
    # float32: the two heads' losses agree to 1e-4 only where neither runs its matmuls in bf16
    settings = replace(FinetuneSettings(), epochs=2, learning_rate=3e-3, batch_size=4, max_length=2048, precision="fp32")
    captured: list[dict] = []
    ft.finetune(model, tokenizer, rows, settings, tmp_path / "work", sink=lambda m, step: captured.append(m))
    return [m for m in captured if "sft_loss" in m]


def test_the_completion_head_trains_as_trl_does(tmp_path, rows, monkeypatch: pytest.MonkeyPatch) -> None:
    from trl import SFTTrainer

    assert ft.on_cpu()
    ours = _train(tmp_path / "ours", rows, None, monkeypatch)
    trl = _train(tmp_path / "trl", rows, SFTTrainer, monkeypatch)
    assert len(ours) == len(trl) == 4  # 8 rows, batches of 4, 2 epochs
    for a, b in zip(ours, trl, strict=True):
        assert a["sft_loss"] == pytest.approx(b["sft_loss"], rel=1e-4)
        assert a["sft_mean_token_accuracy"] == pytest.approx(b["sft_mean_token_accuracy"], abs=1e-6)
        assert a["sft_entropy"] == pytest.approx(b["sft_entropy"], rel=1e-3)
        assert a["sft_num_tokens"] == b["sft_num_tokens"]
    assert ours[-1]["sft_loss"] < ours[0]["sft_loss"]  # it learns


def test_only_the_completion_columns_reach_the_head(tmp_path, rows) -> None:
    import torch

    model, _ = _policy(tmp_path, rows)
    ids = torch.randint(3, 500, (2, 12))
    labels = torch.full_like(ids, -100)
    labels[0, 8:] = ids[0, 8:]  # row 0: a completion at 8..11; row 1: at 10..11
    labels[1, 10:] = ids[1, 10:]
    logits, kept = ft.completion_logits(model, {"input_ids": ids, "labels": labels})
    assert logits.shape[:2] == (2, 4)  # columns 7..10 predict tokens 8..11
    assert torch.equal(kept[0], ids[0, 8:]) and kept[1, :2].eq(-100).all() and torch.equal(kept[1, 2:], ids[1, 10:])
    full = model(input_ids=ids).logits
    assert torch.allclose(logits, full[:, 7:11].float(), atol=1e-5)


def test_bf16_autocast_trains_float32_weights_and_leaves_the_model_generating(tmp_path, rows) -> None:
    """FinetuneSettings.precision "bf16" on the CPU (emulated where the CPU has no native bf16): the summary
    says so, the loss falls, the weights stay float32, and the forward accelerate wrapped in autocast is
    unwrapped, so the next self-supervised round's static-cache generation still runs (with the wrapper
    left on, its bf16 keys met the float32 cache: "index_copy_(): self and source expected to have the
    same dtype")."""
    import torch

    model, tokenizer = _policy(tmp_path, rows)
    settings = replace(FinetuneSettings(), epochs=2, learning_rate=3e-3, batch_size=4, max_length=2048, precision="bf16")
    model, summary = ft.finetune(model, tokenizer, rows, settings, tmp_path / "work")
    assert summary["bf16"] == 1.0 and summary["last_loss"] < summary["first_loss"]
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert "_original_forward" not in model.__dict__
    assert len(_samples(model, tokenizer, rows)) == 2


def test_auto_precision_is_bf16_only_where_the_cpu_has_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ft, "cpu_has_bf16", lambda: True)
    assert ft.device_kwargs("auto") == {"use_cpu": True, "bf16": True}
    assert ft.device_kwargs("fp32") == ft.device_kwargs() == {"use_cpu": True, "bf16": False}
    monkeypatch.setattr(ft, "cpu_has_bf16", lambda: False)
    assert ft.device_kwargs("auto") == {"use_cpu": True, "bf16": False}
    assert ft.device_kwargs("bf16") == {"use_cpu": True, "bf16": True}
    with pytest.raises(ValueError, match=r"precision='fp16': use one of auto, fp32, bf16"):
        FinetuneSettings(precision="fp16")


def test_lora_under_bf16_autocast_comes_back_merged_unwrapped_and_generating(tmp_path, rows) -> None:
    """``lora: true``: peft's adapters train under the autocast accelerate puts on the PeftModel, and the
    fine-tune hands back a plain model: adapters merged, float32 weights, still generating. (The merge returns
    the inner model, which accelerate never wrapped: the wrapper's removal is the bf16 test's to show.)"""
    import torch

    model, tokenizer = _policy(tmp_path, rows)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    settings = replace(FinetuneSettings(), epochs=2, learning_rate=3e-3, batch_size=4, max_length=2048, precision="bf16",
                       lora=True, lora_r=4, lora_alpha=8)
    model, summary = ft.finetune(model, tokenizer, rows, settings, tmp_path / "work")
    assert type(model).__module__.startswith("transformers.") and not hasattr(model, "peft_config")
    assert "_original_forward" not in model.__dict__ and summary["bf16"] == 1.0
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    after = model.state_dict()
    assert set(after) == set(before) and any(not torch.equal(after[k], before[k]) for k in before)  # merged, moved
    assert len(_samples(model, tokenizer, rows)) == 2
