"""Logits processors, applied before temperature: penalties, logit_bias, min_tokens.

Each is `(logits [B, V], rows) -> logits`, batched, and never mutates its input. Semantics:
- repetition_penalty (HF, multiplicative): every token seen in the prompt *or* the output has a
  positive logit divided by the penalty and a negative one multiplied by it.
- presence_penalty / frequency_penalty (OpenAI, additive): counted over *output* tokens only;
  logit -= presence * [count > 0] + frequency * count.
- logit_bias: value added to the token's logit.
- min_tokens: until that many tokens exist, EOS (unless ignore_eos) and stop_token_ids get -inf,
  so the model cannot end early (stop strings are likewise ignored, in the detokenizer).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from tokenstep.sampling.sampler import SamplingRow


def apply_processors(logits: torch.Tensor, rows: Sequence[SamplingRow]) -> torch.Tensor:
    """All processors, in the documented order; returns `logits` itself when none applies."""
    logits = _repetition_penalty(logits, rows)
    logits = _additive_penalties(logits, rows)
    logits = _logit_bias(logits, rows)
    return _min_tokens(logits, rows)


def _token_mask(rows: Sequence[SamplingRow], ids_of, vocab: int, device: torch.device,
                count: bool = False) -> torch.Tensor:
    """[B, V] counts (or presence) of the token ids `ids_of(row)` for every row."""
    lists = [list(ids_of(row)) for row in rows]
    width = max((len(ids) for ids in lists), default=0)
    if width == 0:
        return torch.zeros(len(rows), vocab, device=device)
    # Pad with an extra column `vocab` that is cut off afterwards.
    padded = torch.tensor([ids + [vocab] * (width - len(ids)) for ids in lists], device=device)
    counts = torch.zeros(len(rows), vocab + 1, device=device).scatter_add_(1, padded, torch.ones_like(padded, dtype=torch.float32))
    counts = counts[:, :vocab]
    return counts if count else (counts > 0).float()


def _repetition_penalty(logits: torch.Tensor, rows: Sequence[SamplingRow]) -> torch.Tensor:
    penalties = [row.params.repetition_penalty for row in rows]
    if all(p == 1.0 for p in penalties):
        return logits
    seen = _token_mask(rows, lambda r: [*r.prompt_token_ids, *r.output_token_ids], logits.shape[-1], logits.device) > 0
    penalty = torch.tensor(penalties, device=logits.device)[:, None]
    penalised = torch.where(logits > 0, logits / penalty, logits * penalty)
    return torch.where(seen, penalised, logits)


def _additive_penalties(logits: torch.Tensor, rows: Sequence[SamplingRow]) -> torch.Tensor:
    presence = [row.params.presence_penalty for row in rows]
    frequency = [row.params.frequency_penalty for row in rows]
    if not any(presence) and not any(frequency):
        return logits
    counts = _token_mask(rows, lambda r: r.output_token_ids, logits.shape[-1], logits.device, count=True)
    presence_t = torch.tensor(presence, device=logits.device)[:, None]
    frequency_t = torch.tensor(frequency, device=logits.device)[:, None]
    return logits - presence_t * (counts > 0) - frequency_t * counts


def _logit_bias(logits: torch.Tensor, rows: Sequence[SamplingRow]) -> torch.Tensor:
    entries = [(b, token_id, value) for b, row in enumerate(rows) for token_id, value in (row.params.logit_bias or {}).items()
               if token_id < logits.shape[-1]]
    if not entries:
        return logits
    row_index, token_index, values = zip(*entries)
    bias = torch.zeros_like(logits)
    bias[torch.tensor(row_index), torch.tensor(token_index)] = torch.tensor(values, dtype=logits.dtype, device=logits.device)
    return logits + bias


def _min_tokens(logits: torch.Tensor, rows: Sequence[SamplingRow]) -> torch.Tensor:
    entries = [(b, token_id) for b, row in enumerate(rows) if row.position < row.params.min_tokens
               for token_id in row.stop_ids if token_id < logits.shape[-1]]
    if not entries:
        return logits
    row_index, token_index = zip(*entries)
    masked = logits.clone()
    masked[torch.tensor(row_index), torch.tensor(token_index)] = float("-inf")
    return masked
