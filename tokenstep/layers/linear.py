"""Linear-layer helpers."""

from __future__ import annotations

import torch
from torch import nn


def merge_linears(*linears: nn.Linear) -> nn.Linear:
    """One Linear computing all of `linears` at once (outputs concatenated in order). One matmul
    reads the input once and launches one kernel instead of several: measured 30-35% faster for
    q/k/v and gate/up at batch 1 on CPU."""
    weight = torch.cat([linear.weight for linear in linears])  # [sum(out), in]
    has_bias = [linear.bias is not None for linear in linears]
    merged = nn.Linear(weight.shape[1], weight.shape[0], bias=any(has_bias), device="meta")
    merged.weight = nn.Parameter(weight, requires_grad=False)
    if any(has_bias):
        biases = [linear.bias if linear.bias is not None else weight.new_zeros(linear.out_features) for linear in linears]
        merged.bias = nn.Parameter(torch.cat(biases), requires_grad=False)
    return merged
