"""Steps 3-6 of sampling over the whole vocabulary, keeping every intermediate stage.

This is the reference form of the filters: the lab (`distribution`, `exercise`), traces and
"processed" logprobs use it. The sampler's hot path (draw.py) computes the same distribution over a
short list of candidates instead; tests check the two agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from tokenstep.sampling.sampler import SamplingRow

NUCLEUS_CANDIDATES = 1024  # tokens examined before falling back to a full sort for top-p


@dataclass
class FilterStages:
    """Every stage of steps 3-6 for a batch, kept for the trace and the lab."""

    scaled_probs: torch.Tensor  # [B, V] softmax(logits / T)
    kept_top_k: torch.Tensor  # [B, V] bool
    kept_top_p: torch.Tensor  # [B, V] bool (evaluated on the top-k-filtered distribution)
    kept_min_p: torch.Tensor  # [B, V] bool
    final: torch.Tensor  # [B, V] renormalised probabilities, zero outside the kept set


def filter_tensors(rows: Sequence[SamplingRow], device: torch.device) -> tuple[torch.Tensor, ...]:
    """temperature, top_k, top_p, min_p of `rows` as [B] tensors (T = 0 becomes 1: greedy rows are
    not drawn, and their filter stages are only shown)."""
    return (torch.tensor([row.params.temperature or 1.0 for row in rows], device=device),
            torch.tensor([row.params.top_k for row in rows], device=device),
            torch.tensor([row.params.top_p for row in rows], device=device),
            torch.tensor([row.params.min_p for row in rows], device=device))


def top_k_mask(scaled: torch.Tensor, top_k: torch.Tensor) -> torch.Tensor | None:
    """[B, V] bool: each row's k highest logits (ties with the k-th kept); None when no row uses
    top-k (a full top-k over the vocabulary is a sort: skipped when off). top_k [B], 0 = off."""
    if not bool((top_k > 0).any()):
        return None
    vocab = scaled.shape[-1]
    k = torch.where(top_k > 0, top_k.clamp(max=vocab), torch.full_like(top_k, vocab))
    kth = scaled.topk(int(k.max()), dim=-1).values.gather(1, (k - 1)[:, None])  # [B, 1]
    return scaled >= kth


def filter_stages(logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor,
                  top_p: torch.Tensor, min_p: torch.Tensor) -> FilterStages:
    """Steps 3-6. logits [B, V]; temperature/top_p/min_p [B] (temperature > 0); top_k [B] (0 = off)."""
    scaled = logits / temperature[:, None]
    every = torch.ones_like(scaled, dtype=torch.bool)
    kept_top_k = top_k_mask(scaled, top_k)
    kept_top_k = every if kept_top_k is None else kept_top_k
    probs = scaled.masked_fill(~kept_top_k, float("-inf")).softmax(dim=-1)
    kept_top_p = kept_top_k
    if bool((top_p < 1.0).any()):
        kept_top_p = _nucleus(probs, top_p) & kept_top_k
        probs = probs * kept_top_p
    kept_min_p = every
    if bool((min_p > 0).any()):
        kept_min_p = probs >= min_p[:, None] * probs.max(dim=-1, keepdim=True).values
    final = probs * kept_min_p
    return FilterStages(scaled.softmax(dim=-1), kept_top_k, kept_top_p, kept_min_p,
                        final / final.sum(dim=-1, keepdim=True))


def _nucleus(probs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """[B, V] bool: the smallest most-probable set with probability >= top_p, per row.

    A full sort of the vocabulary costs milliseconds per row, so the nucleus is first sought among
    the top NUCLEUS_CANDIDATES tokens; only rows whose candidates hold less than top_p of the mass
    (a very flat distribution) are sorted in full. Both paths compute the same set."""
    candidates = min(probs.shape[-1], NUCLEUS_CANDIDATES)
    values, order = probs.topk(candidates, dim=-1)  # [B, C], descending
    needs_full = (values.sum(dim=-1) < top_p) & (top_p < 1.0)
    if bool(needs_full.any()):
        values, order = probs.sort(dim=-1, descending=True, stable=True)
    mass_before = values.cumsum(dim=-1) - values  # probability ranked above each candidate
    # The top token has mass_before 0: always kept. Rows with top_p = 1 keep everything (a rounded
    # cumulative sum could otherwise reach 1 before the tail).
    keep = (mass_before < top_p[:, None]) | (top_p[:, None] >= 1.0)
    kept = torch.zeros_like(probs, dtype=torch.bool).scatter(1, order, keep)
    if values.shape[-1] < probs.shape[-1]:
        kept |= (top_p >= 1.0)[:, None]  # tokens beyond the candidates, for rows with top-p off
    return kept
