"""The reference of the `evaluate-one` figure (benchmarks/evaluator_gpu.sh evalone, benchmarks/evalone_ab.sh)."""

import torch


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2.0


def get_inputs():
    return [torch.randn(4096, 4096)]


def get_init_inputs():
    return []
