"""A 64x1024 elementwise reference: small enough on a CPU that `evaluate-one` is mostly its start
(benchmarks/evalone_ab.sh with PROGRAM=benchmarks/evalone/small)."""

import torch


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2.0


def get_inputs():
    return [torch.randn(64, 1024)]


def get_init_inputs():
    return []
