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
from tokenstep.sampling.draw import draw
from tokenstep.sampling.filters import FilterStages, filter_stages, filter_tensors


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


def sample(logits: torch.Tensor, rows: Sequence[SamplingRow]) -> SamplerOutput:
    """Next token of every row from raw logits [B, V] (float32), with logprobs and traces if asked."""
    device = logits.device
    processed = apply_processors(logits, rows)
    sampled = [b for b, row in enumerate(rows) if not row.params.greedy]
    if not sampled:
        tokens = processed.argmax(dim=-1)
    elif len(sampled) == len(rows):
        tokens = draw(processed, rows)
    else:
        tokens = processed.argmax(dim=-1)  # greedy rows (T = 0) are done here
        index = torch.tensor(sampled, device=device)
        tokens[index] = draw(processed[index], [rows[b] for b in sampled])
    token_ids = tokens.tolist()  # the one host sync of the step
    stages = None
    if any(row.params.trace or row.params.logprobs_mode == "processed" for row in rows):
        stages = filter_stages(processed, *filter_tensors(rows, device))
    from tokenstep.sampling.trace import step_logprobs, step_traces  # trace.py imports this module

    return SamplerOutput(token_ids, step_logprobs(logits, processed, stages, rows, token_ids),
                         step_traces(logits, processed, stages, rows, token_ids))
