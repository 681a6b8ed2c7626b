"""Linear, extra bias add, ReLU, multiply by a scalar: one fused GEMM epilogue (bias + ReLU + scale) does it all."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int, scale: float):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.bias = nn.Parameter(torch.randn(out_features) * 0.02)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # (B, in) -> (B, out)
        x = self.linear(x)
        x = x + self.bias
        x = torch.relu(x)
        return x * self.scale


batch_size = 64
in_features = 512
out_features = 256
scale = 1.5


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, scale]
