"""The same program as ref.py, as a candidate."""

import torch


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2.0
