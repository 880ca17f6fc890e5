"""The sampler: logits -> the next token of every request in the batch.

Order (each stage is a pure function of the previous one's output):
  1. processors: repetition/presence/frequency penalties, logit_bias, min_tokens  (processors.py)
  2. temperature 0 -> argmax of the processed logits (greedy; the API convention for T = 0)
  3. temperature: logits / T
  4. top-k: keep the k highest logits (tokens tied with the k-th are kept too)
  5. top-p: keep the smallest most-probable set whose probability sums to >= p; the token that
     crosses p is inside, and the top token is always kept
  6. min-p: keep tokens with probability >= min_p * the top token's probability
  7. renormalise, and draw by inverting the CDF with the request's counter-based uniform number.
Temperature comes before top-k/top-p because it changes the probabilities that top-p sums (the
seeds: "order matters"). Top-p sums the distribution that top-k left, renormalised.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from tokenstep.outputs import StepTrace, TokenLogprob
from tokenstep.params import SamplingParams
from tokenstep.sampling.processors import apply_processors
from tokenstep.sampling.random import uniform


@dataclass(frozen=True)
class SamplingRow:
    """What the sampler needs to know about one row of the batch."""

    params: SamplingParams
    seed: int
    choice_index: int
    position: int  # index of the token being drawn among the request's output tokens
    prompt_token_ids: Sequence[int] = ()
    output_token_ids: Sequence[int] = ()
    stop_ids: frozenset[int] = frozenset()  # EOS (unless ignore_eos) + stop_token_ids, for min_tokens


@dataclass
class SamplerOutput:
    token_ids: list[int]
    logprobs: list[TokenLogprob | None]
    traces: list[StepTrace | None]


@dataclass
class FilterStages:
    """Every stage of steps 3-6 for a batch, kept for the trace and the lab."""

    scaled_probs: torch.Tensor  # [B, V] softmax(logits / T)
    kept_top_k: torch.Tensor  # [B, V] bool
    kept_top_p: torch.Tensor  # [B, V] bool (evaluated on the top-k-filtered distribution)
    kept_min_p: torch.Tensor  # [B, V] bool
    final: torch.Tensor  # [B, V] renormalised probabilities, zero outside the kept set


def filter_stages(logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor,
                  top_p: torch.Tensor, min_p: torch.Tensor) -> FilterStages:
    """Steps 3-6. logits [B, V]; temperature/top_p/min_p [B] (temperature > 0); top_k [B] (0 = off)."""
    scaled = logits / temperature[:, None]
    vocab = logits.shape[-1]
    every = torch.ones_like(scaled, dtype=torch.bool)
    kept_top_k = every
    if bool((top_k > 0).any()):  # a full top-k over the vocabulary is a sort: skip it when off
        k = torch.where(top_k > 0, top_k.clamp(max=vocab), torch.full_like(top_k, vocab))
        kth = scaled.topk(int(k.max()), dim=-1).values.gather(1, (k - 1)[:, None])  # [B, 1]
        kept_top_k = scaled >= kth
    probs = scaled.masked_fill(~kept_top_k, float("-inf")).softmax(dim=-1)
    kept_top_p = kept_top_k
    if bool((top_p < 1.0).any()):
        sorted_probs, order = probs.sort(dim=-1, descending=True, stable=True)
        mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs  # [B, V] probability ranked above
        # The top token has mass_before 0: always kept. Rows with top_p = 1 keep everything (a
        # rounded cumulative sum could otherwise reach 1 before the tail).
        keep_sorted = (mass_before < top_p[:, None]) | (top_p[:, None] >= 1.0)
        kept_top_p = torch.zeros_like(keep_sorted).scatter(1, order, keep_sorted) & kept_top_k
        probs = probs * kept_top_p
    kept_min_p = every
    if bool((min_p > 0).any()):
        kept_min_p = probs >= min_p[:, None] * probs.max(dim=-1, keepdim=True).values
    final = probs * kept_min_p
    return FilterStages(scaled.softmax(dim=-1), kept_top_k, kept_top_p, kept_min_p,
                        final / final.sum(dim=-1, keepdim=True))


def sample(logits: torch.Tensor, rows: Sequence[SamplingRow]) -> SamplerOutput:
    """Next token of every row from raw logits [B, V] (float32), with logprobs and traces if asked."""
    device = logits.device
    processed = apply_processors(logits, rows)
    greedy = torch.tensor([row.params.greedy for row in rows], device=device)
    tokens = processed.argmax(dim=-1)
    stages = None
    if not bool(greedy.all()):
        stages = filter_stages(
            processed,
            torch.tensor([row.params.temperature or 1.0 for row in rows], device=device),
            torch.tensor([row.params.top_k for row in rows], device=device),
            torch.tensor([row.params.top_p for row in rows], device=device),
            torch.tensor([row.params.min_p for row in rows], device=device),
        )
        u = torch.tensor([uniform(r.seed, r.choice_index, r.position) for r in rows], dtype=torch.float64, device=device)
        tokens = torch.where(greedy, tokens, inverse_cdf(stages.final, u))
    token_ids = tokens.tolist()  # the one host sync of the step
    from tokenstep.sampling.trace import step_logprobs, step_traces  # trace.py imports this module

    return SamplerOutput(token_ids, step_logprobs(logits, processed, stages, rows, token_ids),
                         step_traces(logits, processed, stages, rows, token_ids))


def inverse_cdf(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """The token i with cdf[i-1] <= u * total < cdf[i]: an exact draw from `probs` [B, V] given u [B]."""
    cdf = probs.double().cumsum(dim=-1)  # [B, V]
    target = (u * cdf[:, -1])[:, None]
    index = torch.searchsorted(cdf, target, right=True).squeeze(1).clamp(max=probs.shape[-1] - 1)
    # Rounding can put the target past the last kept token: step back to the last non-zero one.
    zero = probs.gather(1, index[:, None]).squeeze(1) == 0
    if bool(zero.any()):
        last_kept = probs.shape[-1] - 1 - (probs.flip(-1) > 0).int().argmax(dim=-1)
        index = torch.where(zero, last_kept, index)
    return index
