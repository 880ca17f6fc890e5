"""Attention over the slot-addressed KV cache: the torch reference path (CPU and CUDA alike).

Each layer writes the K/V of the new tokens into its cache at `slot_mapping`, then gathers each
sequence's whole context by `context_slots` and runs one scaled-dot-product attention over the padded
batch. K/V of a position are computed once, when the token is first run, and never again.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from tokenstep.runner.forward_batch import ForwardBatch


@dataclass
class KVCache:
    """One layer's cache: K and V for every slot of the pool."""

    key: torch.Tensor  # [num_slots, KvH, D]
    value: torch.Tensor  # [num_slots, KvH, D]


def paged_attention(
    q: torch.Tensor,  # [T, H, D]
    k: torch.Tensor,  # [T, KvH, D]
    v: torch.Tensor,  # [T, KvH, D]
    cache: KVCache,
    batch: ForwardBatch,
    scale: float,
) -> torch.Tensor:  # [T, H * D]
    num_tokens, num_heads, head_dim = q.shape
    cache.key.index_copy_(0, batch.slot_mapping, k)
    cache.value.index_copy_(0, batch.slot_mapping, v)
    if batch.causal:
        # Single sequence without a cached prefix: the new tokens are the whole context.
        out = F.scaled_dot_product_attention(
            q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1),
            is_causal=num_tokens > 1, scale=scale, enable_gqa=True,
        )  # [H, T, D]
        return out.transpose(0, 1).reshape(num_tokens, num_heads * head_dim)
    keys = cache.key[batch.context_slots].transpose(1, 2)  # [B, KvH, K, D]
    values = cache.value[batch.context_slots].transpose(1, 2)
    queries = q[batch.query_index].transpose(1, 2)  # [B, H, Q, D]
    out = F.scaled_dot_product_attention(
        queries, keys, values, attn_mask=batch.attn_mask, scale=scale, enable_gqa=True,
    )  # [B, H, Q, D]
    out = out.transpose(1, 2).reshape(-1, num_heads * head_dim)  # [B*Q, H*D]
    return out[batch.output_index]
