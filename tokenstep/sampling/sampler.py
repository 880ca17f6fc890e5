"""The sampler: logits -> the next token of every request in the batch.

Order (each step is a pure function of the previous one's output):
  1. processors: penalties, logit_bias, min_tokens masks      (sampling/processors.py)
  2. temperature 0 -> argmax of the processed logits (greedy)
  3. temperature: logits / T
  4. top-k: keep the k highest logits (ties with the k-th are kept)
  5. top-p: keep the smallest most-probable set whose probability sums to >= p (always >= 1 token)
  6. min-p: keep tokens with probability >= min_p * the top token's probability
  7. renormalise, and draw by inverting the CDF with the request's counter-based uniform.
Temperature comes before top-k/top-p because it changes the probabilities top-p sums (the seeds:
"order matters").
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tokenstep.sampling.random import uniform


@dataclass(frozen=True)
class SamplingRow:
    """What the sampler needs to know about one row of the batch."""

    temperature: float
    top_k: int  # 0 = off
    top_p: float  # 1.0 = off
    min_p: float  # 0.0 = off
    seed: int
    choice_index: int
    position: int  # index of the token being drawn among the request's output tokens


def filter_probabilities(logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor,
                         top_p: torch.Tensor, min_p: torch.Tensor) -> torch.Tensor:
    """Steps 3-6 for a batch: logits [B, V] -> final probabilities [B, V] (zeros outside the kept set).
    temperature/top_p/min_p: [B] float (temperature > 0), top_k: [B] long (0 = off)."""
    logits = logits / temperature[:, None]
    vocab = logits.shape[-1]
    k = torch.where(top_k > 0, top_k.clamp(max=vocab), torch.full_like(top_k, vocab))
    if bool((k < vocab).any()):
        kth = logits.topk(int(k.max()), dim=-1).values.gather(1, (k - 1)[:, None])  # [B, 1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = logits.softmax(dim=-1)
    if bool((top_p < 1.0).any()):
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs  # [B, V] probability ranked above
        drop_sorted = mass_before >= top_p[:, None]  # the first token always has mass_before 0
        probs = probs.masked_fill(drop_sorted.scatter(1, order, drop_sorted), 0.0)
    if bool((min_p > 0).any()):
        threshold = min_p[:, None] * probs.max(dim=-1, keepdim=True).values
        probs = probs.masked_fill(probs < threshold, 0.0)
    return probs / probs.sum(dim=-1, keepdim=True)


def sample(logits: torch.Tensor, rows: list[SamplingRow]) -> torch.Tensor:
    """Next token ids [B] from processed logits [B, V] (float32)."""
    greedy = torch.tensor([row.temperature == 0.0 for row in rows], device=logits.device)
    tokens = logits.argmax(dim=-1)
    if bool(greedy.all()):
        return tokens
    device = logits.device
    probs = filter_probabilities(
        logits,
        torch.tensor([row.temperature or 1.0 for row in rows], device=device),
        torch.tensor([row.top_k for row in rows], device=device),
        torch.tensor([row.top_p for row in rows], device=device),
        torch.tensor([row.min_p for row in rows], device=device),
    )
    u = torch.tensor([uniform(r.seed, r.choice_index, r.position) for r in rows], dtype=torch.float64, device=device)
    drawn = inverse_cdf(probs, u)
    return torch.where(greedy, tokens, drawn)


def inverse_cdf(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Token i such that cdf[i-1] <= u * total < cdf[i]: an exact draw from `probs` given uniform u [B]."""
    cdf = probs.double().cumsum(dim=-1)  # [B, V]
    target = (u * cdf[:, -1])[:, None]
    index = torch.searchsorted(cdf, target, right=True).squeeze(1)
    # Rounding can put the target past the last kept token: step back to the last non-zero one.
    index = index.clamp(max=probs.shape[-1] - 1)
    zero = probs.gather(1, index[:, None]).squeeze(1) == 0
    if bool(zero.any()):
        last_kept = probs.shape[-1] - 1 - (probs.flip(-1) > 0).int().argmax(dim=-1)
        index = torch.where(zero, last_kept, index)
    return index
