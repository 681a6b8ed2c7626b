"""Softmax over 4096 columns of uniform [0, 1) inputs: every output is below e/4096 ~ 6.6e-4, so an all-zeros candidate passes atol=1e-2 (use a scale-aware tolerance)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


batch_size = 16
columns = 4096


def get_inputs():
    # rand, not randn: bounds the largest output at e / columns whatever the draw.
    return [torch.rand(batch_size, columns)]


def get_init_inputs():
    return []
