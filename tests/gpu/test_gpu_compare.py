"""On the device: the output comparison's one read of an all-finite chunk gives what reading each figure on
its own gives (tests/test_compare_one_read.py's cases, moved to CUDA).

Run on the device machine: ``PYTHONPATH=. python -m pytest -m gpu tests/gpu``.
"""

from __future__ import annotations

import pytest
import torch

from cudal1.evaluator.compare import _compare_tensor
from tests.test_compare_one_read import CFG, _cases

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


@pytest.mark.parametrize("chunk", [64, 1 << 25])
@pytest.mark.parametrize("case", _cases(), ids=lambda c: c[0])
def test_one_read_on_cuda_gives_what_reading_each_figure_gives(case: tuple, chunk: int) -> None:
    _, ref, out = case
    ref, out = ref.cuda(), out.cuda()
    assert _compare_tensor(ref, out, CFG, chunk=chunk) == _compare_tensor(ref, out, CFG, chunk=chunk, one_read=False)

