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
    num_seqs, max_context = batch.context_slots.shape
    flat_slots = batch.context_slots.flatten()
    # index_select on a flat index is several times faster than 2-D fancy indexing on CPU.
    keys = cache.key.index_select(0, flat_slots).view(num_seqs, max_context, -1, head_dim).transpose(1, 2)
    values = cache.value.index_select(0, flat_slots).view(num_seqs, max_context, -1, head_dim).transpose(1, 2)
    queries = q.index_select(0, batch.query_index.flatten()).view(num_seqs, -1, num_heads, head_dim)  # [B, Q, H, D]
    out = _grouped_attention(queries, keys, values, batch.attn_mask, scale)  # [B, Q, H, D]
    return out.reshape(-1, num_heads * head_dim).index_select(0, batch.output_index)


def _grouped_attention(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                       mask: torch.Tensor | None, scale: float) -> torch.Tensor:
    """GQA as plain attention: the G query heads sharing a KV head are stacked along the query axis,
    so K/V are never repeated and each (sequence, KV head) is one small matmul.
    queries [B, Q, H, D], keys/values [B, KvH, K, D], mask [B, 1, Q, K] or None -> [B, Q, H, D]."""
    num_seqs, num_queries, num_heads, head_dim = queries.shape
    num_kv_heads = keys.shape[1]
    group = num_heads // num_kv_heads
    q = queries.view(num_seqs, num_queries, num_kv_heads, group, head_dim).permute(0, 2, 3, 1, 4)
    q = q.reshape(num_seqs, num_kv_heads, group * num_queries, head_dim)  # rows: (head in group, query)
    if mask is not None and group > 1:
        mask = mask.expand(num_seqs, group, num_queries, mask.shape[-1]).reshape(num_seqs, 1, group * num_queries, -1)
    if num_queries == 1:
        out = _decode_attention(q, keys, values, mask, scale)
    else:
        out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=scale)  # [B, KvH, G*Q, D]
    out = out.view(num_seqs, num_kv_heads, group, num_queries, head_dim).permute(0, 3, 1, 2, 4)
    return out.reshape(num_seqs, num_queries, num_heads, head_dim)


def _decode_attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None,
                      scale: float) -> torch.Tensor:
    """Attention for one query per sequence as two batched matmuls: for these tiny queries torch's
    fused CPU kernel spends more on setup than on math (measured ~2x slower in bfloat16).
    The softmax runs in float32, as transformers' eager attention does."""
    scores = torch.matmul(q, keys.transpose(-1, -2)) * scale  # [B, KvH, G, K]
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(dim=-1, dtype=torch.float32).to(values.dtype)
    return torch.matmul(weights, values)  # [B, KvH, G, D]
