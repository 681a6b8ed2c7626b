"""Linear, min with min_value, clamp to [min_value, max_value]: with min_value=0 the output is always 0, the constant min-clamp chain of KernelBench L2-83 (Conv3d_GroupNorm_Min_Clamp_Dropout); a candidate may skip the linear only if that degenerate shortcut is allowed."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int, min_value: float, max_value: float):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.min_value = min_value
        self.max_value = max_value

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.linear(x)
        # min(x, v) <= v, then clamp(min=v) lifts everything to exactly v.
        x = torch.min(x, torch.tensor(self.min_value, device=x.device))
        return torch.clamp(x, min=self.min_value, max=self.max_value)


batch_size = 64
in_features = 512
out_features = 256
min_value = 0.0
max_value = 1.0


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, min_value, max_value]
