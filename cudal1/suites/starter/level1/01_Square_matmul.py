"""Square matrix multiplication C = A @ B (256 x 256, fp32)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        # (N, N) @ (N, N) -> (N, N)
        return torch.matmul(A, B)


N = 256


def get_inputs():
    return [torch.randn(N, N), torch.randn(N, N)]


def get_init_inputs():
    return []
