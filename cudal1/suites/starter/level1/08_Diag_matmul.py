"""diag(a) @ B with a dense (N, N) diagonal; known algebraic shortcut: a.unsqueeze(1) * B (O(N*M), no matmul)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        # a: (N,), B: (N, M) -> (N, M); builds an (N, N) matrix that is zero off the diagonal.
        return torch.diag(a) @ B


N = 512
M = 256


def get_inputs():
    return [torch.randn(N), torch.randn(N, M)]


def get_init_inputs():
    return []
