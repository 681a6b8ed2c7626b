"""benchmarks/nvcc_phases.py times the CUDA file of a release program's own load_inline call: it must take
that call's CUDA source, not the program's C++ declarations beside it, and name a program that makes none."""

from __future__ import annotations

import pytest
from scripts import load_script

PROGRAM = '''
import torch
from torch.utils.cpp_extension import load_inline

cpp_source = """
torch::Tensor scale(torch::Tensor x);
"""

cuda_source = r"""
__global__ void scale_kernel(float* x, int n) { int i = threadIdx.x; if (i < n) x[i] *= 2.0f; }
torch::Tensor scale(torch::Tensor x) { scale_kernel<<<1, 32>>>(x.data_ptr<float>(), x.numel()); return x; }
"""

ext = load_inline(name="scale", cpp_sources=cpp_source, cuda_sources=cuda_source, functions=["scale"])
'''


def test_the_cuda_source_is_the_one_the_program_passes_to_load_inline() -> None:
    source = load_script("nvcc_phases").cuda_build(PROGRAM)["cuda_sources"]
    assert "__global__ void scale_kernel" in source
    assert "torch::Tensor scale(torch::Tensor x);" not in source


def test_a_program_without_a_cuda_build_is_refused_by_name() -> None:
    with pytest.raises(SystemExit, match="cuda_sources"):
        load_script("nvcc_phases").cuda_build("import torch\nx = torch.ones(3)\n")
