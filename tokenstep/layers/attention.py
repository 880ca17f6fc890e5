"""Attention over the slot-addressed KV cache: the torch reference path (CPU and CUDA alike).

Each layer writes the K/V of the new tokens into its cache at `slot_mapping`, then gathers each
sequence's whole context by `context_slots` and attends over the padded batch. K/V of a position are
computed once, when the token is first run, and never again.

The cache is laid out head-major, [KvH, slots, D], so the gather of a batch's contexts comes out as
[KvH, B, K, D]: contiguous, and directly the batch layout of the decode matmuls (no copy).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from tokenstep.runner.forward_batch import ForwardBatch


# Below this many sequences torch's fused SDPA kernel is faster for one-token queries; above it two
# batched matmuls are (bfloat16, 2 cores: 28 vs 81 µs per layer at 1 sequence, 382 vs 587 at 32).
MATMUL_DECODE_MIN_SEQS = 12


@dataclass
class KVCache:
    """One layer's cache: K and V for every slot of the pool."""

    key: torch.Tensor  # [KvH, num_slots, D]
    value: torch.Tensor  # [KvH, num_slots, D]


def paged_attention(
    q: torch.Tensor,  # [T, H, D]
    k: torch.Tensor,  # [T, KvH, D]
    v: torch.Tensor,  # [T, KvH, D]
    cache: KVCache,
    batch: ForwardBatch,
    scale: float,
) -> torch.Tensor:  # [T, H * D]
    num_tokens, num_heads, head_dim = q.shape
    cache.key.index_copy_(1, batch.slot_mapping, k.transpose(0, 1))
    cache.value.index_copy_(1, batch.slot_mapping, v.transpose(0, 1))
    if batch.causal:
        # Single sequence without a cached prefix: the new tokens are the whole context.
        out = F.scaled_dot_product_attention(
            q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1),
            is_causal=num_tokens > 1, scale=scale, enable_gqa=True,
        )  # [H, T, D]
        return out.transpose(0, 1).reshape(num_tokens, num_heads * head_dim)
    num_seqs, max_context = batch.context_slots.shape
    num_kv_heads = cache.key.shape[0]
    # One row gather over the flattened [KvH * slots, D] cache (index_select along dim 0 is the fast
    # one on CPU), with an index built once per step for all layers (ForwardBatch.head_major_slots).
    index = batch.head_major_slots(num_kv_heads, cache.key.shape[1])
    keys = cache.key.view(-1, head_dim).index_select(0, index).view(num_kv_heads, num_seqs, max_context, head_dim)
    values = cache.value.view(-1, head_dim).index_select(0, index).view(num_kv_heads, num_seqs, max_context, head_dim)
    queries = q.index_select(0, batch.query_index.flatten()).view(num_seqs, -1, num_heads, head_dim)  # [B, Q, H, D]
    if queries.shape[1] == 1 and num_seqs >= MATMUL_DECODE_MIN_SEQS:
        out = _decode_attention(queries, keys, values, batch.attn_mask, scale)  # [B, 1, H, D]
    else:
        out = _grouped_attention(queries, keys, values, batch.attn_mask, scale)  # [B, Q, H, D]
    return out.reshape(-1, num_heads * head_dim).index_select(0, batch.output_index)


def _decode_attention(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None,
                      scale: float) -> torch.Tensor:
    """One query per sequence, as two batched matmuls over (KV head, sequence): for such tiny
    queries torch's fused CPU kernel spends more on setup than on math (~2x slower in bfloat16).
    The G query heads sharing a KV head are the rows of one matmul. The softmax runs in float32,
    as transformers' eager attention does.
    queries [B, 1, H, D], keys/values [KvH, B, K, D], mask [B, 1, 1, K] or None -> [B, 1, H, D]."""
    num_seqs, _, num_heads, head_dim = queries.shape
    num_kv_heads = keys.shape[0]
    group = num_heads // num_kv_heads
    q = queries.view(num_seqs, num_kv_heads, group, head_dim).transpose(0, 1)  # [KvH, B, G, D]
    scores = torch.matmul(q, keys.transpose(-1, -2)) * scale  # [KvH, B, G, K]
    if mask is not None:
        scores = scores.masked_fill(~mask.view(1, num_seqs, 1, -1), float("-inf"))
    weights = scores.softmax(dim=-1, dtype=torch.float32).to(values.dtype)
    out = torch.matmul(weights, values)  # [KvH, B, G, D]
    return out.transpose(0, 1).reshape(num_seqs, 1, num_heads, head_dim)


def _grouped_attention(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                       mask: torch.Tensor | None, scale: float) -> torch.Tensor:
    """GQA as plain attention: the G query heads sharing a KV head are stacked along the query axis,
    so K/V are never repeated and each (sequence, KV head) is one attention call.
    queries [B, Q, H, D], keys/values [KvH, B, K, D], mask [B, 1, Q, K] or None -> [B, Q, H, D]."""
    num_seqs, num_queries, num_heads, head_dim = queries.shape
    num_kv_heads = keys.shape[0]
    group = num_heads // num_kv_heads
    q = queries.view(num_seqs, num_queries, num_kv_heads, group, head_dim).permute(0, 2, 3, 1, 4)
    q = q.reshape(num_seqs, num_kv_heads, group * num_queries, head_dim)  # rows: (head in group, query)
    if mask is not None and group > 1:
        mask = mask.expand(num_seqs, group, num_queries, mask.shape[-1]).reshape(num_seqs, 1, group * num_queries, -1)
    out = F.scaled_dot_product_attention(q, keys.transpose(0, 1), values.transpose(0, 1), attn_mask=mask,
                                         scale=scale)  # [B, KvH, G*Q, D]
    out = out.view(num_seqs, num_kv_heads, group, num_queries, head_dim).permute(0, 3, 1, 2, 4)
    return out.reshape(num_seqs, num_queries, num_heads, head_dim)
