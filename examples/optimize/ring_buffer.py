"""A streaming filter's state: a ring buffer shifted one slot per step, then smoothed. Written the way
such code often is (many small slices and reshapes), not in benchmark form: the class is RingBuffer and
its example inputs come from example_inputs()."""

import torch
import torch.nn as nn


class RingBuffer(nn.Module):
    def __init__(self, steps: int = 100):
        super().__init__()
        self.steps = steps
        self.register_buffer("kernel", torch.tensor([0.25, 0.5, 0.25]))

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        for _ in range(self.steps):
            state = state.view(8, 8).t().unsqueeze(0).squeeze(0).t().reshape(64)[1:]
            state = torch.cat([state, state[:1]])
        return torch.nn.functional.conv1d(state.view(1, 1, 64), self.kernel.view(1, 1, 3), padding=1).view(64)


def example_inputs():
    return [torch.randn(64)]
