"""Softmax over dim 1 of a (16, 256) tensor; outputs are O(1e-2..1), so an absolute tolerance is meaningful."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=self.dim)


batch_size = 16
features = 256
softmax_dim = 1


def get_inputs():
    # Scaled so that each row has a few dominant entries.
    return [torch.randn(batch_size, features) * 4.0]


def get_init_inputs():
    return [softmax_dim]
