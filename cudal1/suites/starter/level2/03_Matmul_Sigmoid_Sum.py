"""Linear (matmul + bias), sigmoid, sum over features: (64, 512) -> (64, 1); fuse sigmoid and row-sum into the GEMM."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features: int, hidden: int):
        super().__init__()
        self.linear = nn.Linear(in_features, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.linear(x)  # (B, hidden)
        x = torch.sigmoid(x)
        return torch.sum(x, dim=1, keepdim=True)  # (B, 1)


batch_size = 64
in_features = 512
hidden = 256


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, hidden]
