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
    """All processors, in the documented order; returns `logits` itself when none applies.
    Penalties touch only the tokens in each row's history (gather/scatter), never the whole [B, V]."""
    logits = _repetition_penalty(logits, rows)
    logits = _additive_penalties(logits, rows)
    logits = _logit_bias(logits, rows)
    return _min_tokens(logits, rows)


def _history(rows: Sequence[SamplingRow], ids_of, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids [B, L] of each row's history and a validity mask [B, L]. Padding repeats the row's
    first id, so a scatter over the padded ids writes only values that belong to real tokens."""
    lists = [list(ids_of(row)) for row in rows]
    width = max(len(ids) for ids in lists)
    padded = [ids + [ids[0] if ids else 0] * (width - len(ids)) for ids in lists]
    valid = [[True] * len(ids) + [False] * (width - len(ids)) for ids in lists]
    return torch.tensor(padded, device=device), torch.tensor(valid, device=device)


def _repetition_penalty(logits: torch.Tensor, rows: Sequence[SamplingRow]) -> torch.Tensor:
    penalties = [row.params.repetition_penalty for row in rows]
    if all(p == 1.0 for p in penalties):
        return logits
    ids, valid = _history(rows, lambda r: [*r.prompt_token_ids, *r.output_token_ids], logits.device)
    if ids.shape[1] == 0:
        return logits
    penalty = torch.tensor(penalties, device=logits.device)[:, None]
    current = logits.gather(1, ids)  # [B, L]
    penalised = torch.where(current > 0, current / penalty, current * penalty)
    # A row without history has only padding (id 0): write its own value back unchanged.
    penalised = torch.where(valid.any(dim=1, keepdim=True), penalised, current)
    return logits.scatter(1, ids, penalised)


def _additive_penalties(logits: torch.Tensor, rows: Sequence[SamplingRow]) -> torch.Tensor:
    presence = [row.params.presence_penalty for row in rows]
    frequency = [row.params.frequency_penalty for row in rows]
    if not any(presence) and not any(frequency):
        return logits
    ids, valid = _history(rows, lambda r: r.output_token_ids, logits.device)
    if ids.shape[1] == 0:
        return logits
    has_history = valid.any(dim=1, keepdim=True)
    presence_t = torch.tensor(presence, device=logits.device)[:, None] * has_history  # [B, 1]
    # Presence: once per distinct token (duplicates write the same value).
    logits = logits.scatter(1, ids, logits.gather(1, ids) - presence_t)
    # Frequency: once per occurrence (padding adds 0).
    frequency_t = torch.tensor(frequency, device=logits.device)[:, None] * valid  # [B, L]
    return logits.scatter_add(1, ids, -frequency_t)


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
