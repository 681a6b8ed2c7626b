"""The output comparison reads an all-finite chunk's figures in one device read: the verdict, the reason
and every error figure are those of reading each figure on its own, on outputs that pass, fail by a few
elements, fail the scale-aware check, carry NaN/Inf (matching or not) and span several chunks."""

from __future__ import annotations

import pytest
import torch

from cudal1.evaluator.compare import _compare_tensor
from cudal1.evaluator.config import EvalConfig

CFG = EvalConfig(device="cpu")


def _cases() -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(7)
    ref = torch.randn(3000, generator=g)
    few = ref.clone()
    few[[5, 1700, 2999]] += 1.0
    nan_both, nan_one = ref.clone(), ref.clone()
    nan_both[[10, 2500]] = float("nan")
    out_nan_both = (ref + 1e-6).clone()
    out_nan_both[[10, 2500]] = float("nan")
    nan_one[2500] = float("nan")
    inf_ref = ref.clone()
    inf_ref[100] = float("inf")
    inf_out = (ref + 1e-7).clone()
    inf_out[100] = float("-inf")
    tiny = ref * 1e-7
    all_nan = torch.full((500,), float("nan"))
    return [
        ("passes", ref, ref + 1e-6 * torch.randn(3000, generator=g)),
        ("equal", ref, ref.clone()),
        ("few off", ref, few),
        ("all off", ref, ref + 0.5),
        ("zeros for a small reference", tiny, torch.zeros_like(tiny)),
        ("NaN where the reference has NaN", nan_both, out_nan_both),
        ("NaN where the reference is finite", ref, nan_one),
        ("Inf of the other sign", inf_ref, inf_out),
        ("all NaN", all_nan, all_nan.clone()),
        ("float16", ref.half(), (ref + 1e-3).half()),
        ("bfloat16", ref.bfloat16(), (ref * 1.01).bfloat16()),
        ("float64", ref.double(), ref.double() + 1e-9),
        ("complex", torch.complex(ref, ref.flip(0)), torch.complex(ref + 1e-6, ref.flip(0))),
    ]


@pytest.mark.parametrize("chunk", [64, 1000, 1 << 25])
@pytest.mark.parametrize("case", _cases(), ids=lambda c: c[0])
def test_one_read_gives_what_reading_each_figure_gives(case: tuple[str, torch.Tensor, torch.Tensor], chunk: int) -> None:
    _, ref, out = case
    fast = _compare_tensor(ref, out, CFG, chunk=chunk)
    slow = _compare_tensor(ref, out, CFG, chunk=chunk, one_read=False)
    assert fast == slow


def test_the_cases_cover_both_verdicts_and_the_non_finite_paths() -> None:
    verdicts = {name: _compare_tensor(ref, out, CFG, chunk=64) for name, ref, out in _cases()}
    assert verdicts["passes"].ok and verdicts["NaN where the reference has NaN"].ok and verdicts["all NaN"].ok
    assert "3 of 3000 elements outside" in verdicts["few off"].reason
    assert "relative L2" in verdicts["zeros for a small reference"].reason
    assert "NaN/Inf where the reference is finite" in verdicts["NaN where the reference is finite"].reason
    assert "non-finite elements differ" in verdicts["Inf of the other sign"].reason
