"""The candidate of the `evaluate-one` figure: the same elementwise program, written another way."""

import torch


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return torch.clamp_min(x, 0.0).mul_(2.0)
