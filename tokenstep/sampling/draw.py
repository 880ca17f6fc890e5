"""The draw: the next token of each sampled row, exactly from the filtered distribution, fast.

Filtering the whole vocabulary (a sort of 49k probabilities per row) costs milliseconds; but the
support of a top-k / top-p row is a handful of tokens. So each filtered row looks at its top 64
candidates, then 1024, then the whole sorted vocabulary, stopping at the first list that provably
holds its kept set, and draws by inverse CDF over that list in descending order of probability.
How far a row escalates depends only on its own distribution, so the token drawn for a given
(seed, choice, position) never depends on what else is in the batch. Rows without top-k/top-p
draw by inverse CDF over the vocabulary in token-id order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from tokenstep.sampling.filters import filter_tensors, top_k_mask
from tokenstep.sampling.random import uniform

if TYPE_CHECKING:
    from tokenstep.sampling.sampler import SamplingRow

CANDIDATE_LADDER = (64, 1024)  # list lengths tried before a full sort


def draw(logits: torch.Tensor, rows: Sequence[SamplingRow]) -> torch.Tensor:
    """Token ids [B] drawn from processed logits [B, V] of rows with temperature > 0."""
    device = logits.device
    temperature, top_k, top_p, min_p = filter_tensors(rows, device)
    u = torch.tensor([uniform(r.seed, r.choice_index, r.position) for r in rows], dtype=torch.float64, device=device)
    scaled = logits / temperature[:, None]
    kept_top_k = top_k_mask(scaled, top_k)
    if kept_top_k is not None:
        scaled = scaled.masked_fill(~kept_top_k, float("-inf"))
    probs = scaled.softmax(dim=-1)  # [B, V], top-k applied
    filtered = (top_k > 0) | (top_p < 1.0)
    if bool(filtered.all()):  # the usual case: no row copies
        return _draw_from_candidates(probs, top_p, min_p, u)
    tokens = torch.empty(len(rows), dtype=torch.long, device=device)
    if bool(filtered.any()):
        index = filtered.nonzero().squeeze(1)
        tokens[index] = _draw_from_candidates(probs[index], top_p[index], min_p[index], u[index])
    index = (~filtered).nonzero().squeeze(1)
    plain = probs[index]
    plain = plain * (plain >= min_p[index, None] * plain.max(dim=-1, keepdim=True).values)
    tokens[index] = inverse_cdf(plain, u[index])
    return tokens


def _draw_from_candidates(probs: torch.Tensor, top_p: torch.Tensor, min_p: torch.Tensor,
                          u: torch.Tensor) -> torch.Tensor:
    tokens = torch.empty(probs.shape[0], dtype=torch.long, device=probs.device)
    left = torch.arange(probs.shape[0], device=probs.device)  # rows not drawn yet
    vocab = probs.shape[-1]
    for length in (*(c for c in CANDIDATE_LADDER if c < vocab), vocab):
        rows_probs = probs if left.numel() == probs.shape[0] else probs[left]
        if length < vocab:
            values, order = rows_probs.topk(length, dim=-1)  # [R, C], descending
        else:
            values, order = rows_probs.sort(dim=-1, descending=True, stable=True)
        # The kept set is inside the list if the nucleus closes in it or top-k zeroed the rest.
        fits = (values.sum(dim=-1) >= top_p[left]) | (values[:, -1] == 0) | (length == vocab)
        done = fits.nonzero().squeeze(1)
        kept = _kept(values[done], top_p[left[done]], min_p[left[done]])
        choice = inverse_cdf(kept, u[left[done]])
        tokens[left[done]] = order[done].gather(1, choice[:, None]).squeeze(1)
        left = left[~fits]
        if left.numel() == 0:
            break
    return tokens


def _kept(values: torch.Tensor, top_p: torch.Tensor, min_p: torch.Tensor) -> torch.Tensor:
    """Candidate probabilities (descending) with top-p and min-p applied, as in filters.py."""
    mass_before = values.cumsum(dim=-1) - values
    keep = (mass_before < top_p[:, None]) | (top_p[:, None] >= 1.0)
    values = values * keep
    return values * (values >= min_p[:, None] * values[:, :1])  # the first candidate is the top token


def inverse_cdf(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """The index i with cdf[i-1] <= u * total < cdf[i]: an exact draw from `probs` [B, N] given u [B]."""
    cdf = probs.double().cumsum(dim=-1)  # [B, N]
    target = (u * cdf[:, -1])[:, None]
    index = torch.searchsorted(cdf, target, right=True).squeeze(1).clamp(max=probs.shape[-1] - 1)
    # Rounding can put the target past the last kept token: step back to the last non-zero one.
    zero = probs.gather(1, index[:, None]).squeeze(1) == 0
    if bool(zero.any()):
        last_kept = probs.shape[-1] - 1 - (probs.flip(-1) > 0).int().argmax(dim=-1)
        index = torch.where(zero, last_kept, index)
    return index
