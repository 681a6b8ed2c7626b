"""Multi-head self-attention with plain matmuls: softmax(QK^T / sqrt(d)) V and an output projection, (8, 64, 64), 4 heads; a fused (flash) attention kernel is the known rewrite."""

import math

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim: int, n_heads: int):
        super().__init__()
        assert dim % n_heads == 0, "dim must be divisible by n_heads"
        self.n_heads = n_heads
        self.head_dim = dim // n_heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)  # each (B, T, C)
        # (B, T, C) -> (B, H, T, d)
        q = q.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        k = k.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        v = v.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        att = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.head_dim)  # (B, H, T, T)
        att = torch.softmax(att, dim=-1)
        y = torch.matmul(att, v)  # (B, H, T, d)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)


batch_size = 8
seq_len = 64
dim = 64
n_heads = 4


def get_inputs():
    return [torch.randn(batch_size, seq_len, dim)]


def get_init_inputs():
    return [dim, n_heads]
