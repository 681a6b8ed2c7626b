"""Pre-norm transformer MLP block: x + Linear(GELU(Linear(LayerNorm(x)))), (16, 64, 128) with a 4x hidden size."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc_in = nn.Linear(dim, hidden)
        self.fc_out = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: (B, T, dim) -> (B, T, dim)
        h = self.fc_in(self.norm(x))  # (B, T, hidden)
        h = F.gelu(h)
        return x + self.fc_out(h)


batch_size = 16
seq_len = 64
dim = 128
hidden = 4 * dim


def get_inputs():
    return [torch.randn(batch_size, seq_len, dim)]


def get_init_inputs():
    return [dim, hidden]
