"""LayerNorm over the last dim (512) of a (16, 64, 512) tensor, with learned affine parameters."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, normalized_shape: int):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x)


batch_size = 16
seq_len = 64
hidden = 512


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden)]


def get_init_inputs():
    return [hidden]
