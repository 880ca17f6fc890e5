"""ForwardBatch: the explicit description of one forward pass, passed down to every layer.

A batch is a flat run of T new tokens from B sequences (prefill chunks and decode tokens mixed).
Attention needs to know, per sequence, which cache slots hold its context and which of the flat
tokens are its queries; that is built once per step here, never read from a global.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class ForwardBatch:
    input_ids: torch.Tensor  # [T] int64
    positions: torch.Tensor  # [T] int64, position of each token in its sequence
    slot_mapping: torch.Tensor  # [T] int64, cache slot each token's K/V is written to
    context_slots: torch.Tensor  # [B, K] int64, slots of each sequence's whole context (padded with 0)
    query_index: torch.Tensor  # [B, Q] int64, flat token index of each sequence's queries (padded with 0)
    output_index: torch.Tensor  # [T] int64, where each flat token sits in the [B*Q] padded layout
    attn_mask: torch.Tensor | None  # [B, 1, Q, K] bool (True = attend), or None when `causal` suffices
    causal: bool  # one sequence, no cached prefix: plain causal attention, no mask needed
    logits_index: torch.Tensor  # [N] flat indices whose logits are wanted (last token of each chunk)

    _head_major: torch.Tensor | None = field(default=None, repr=False)  # memo of head_major_slots

    @property
    def num_sequences(self) -> int:
        return self.context_slots.shape[0]

    def head_major_slots(self, num_kv_heads: int, num_slots: int) -> torch.Tensor:
        """[KvH * B * K] row indices into a head-major cache viewed as [KvH * num_slots, D]: every
        head's copy of `context_slots`. Built on first use, then shared by every layer of the step."""
        if self._head_major is None:
            heads = torch.arange(num_kv_heads, device=self.context_slots.device)[:, None] * num_slots
            self._head_major = (heads + self.context_slots.flatten()[None, :]).flatten()
        return self._head_major
