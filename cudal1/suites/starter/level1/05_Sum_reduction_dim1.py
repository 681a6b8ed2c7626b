"""Sum reduction over dim 1 of a (16, 512, 64) tensor, keeping the reduced dim."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # (B, D1, D2) -> (B, 1, D2)
        return torch.sum(x, dim=self.dim, keepdim=True)


batch_size = 16
dim1 = 512
dim2 = 64
reduce_dim = 1


def get_inputs():
    return [torch.randn(batch_size, dim1, dim2)]


def get_init_inputs():
    return [reduce_dim]
