"""Logprobs and the per-step trace: what the sampler saw, labelled by which distribution it is.

Logprobs come from the model's raw distribution (log_softmax of the logits) by default, or, with
logprobs_mode="processed", from the distribution actually sampled (after processors, temperature and
filters; filtered tokens get -inf; at T = 0, log_softmax of the processed logits).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from tokenstep.outputs import StepTrace, TokenLogprob, TraceCandidate
from tokenstep.sampling.filters import FilterStages
from tokenstep.sampling.sampler import SamplingRow


def step_logprobs(raw: torch.Tensor, processed: torch.Tensor, stages: FilterStages | None,
                  rows: Sequence[SamplingRow], token_ids: list[int]) -> list[TokenLogprob | None]:
    """Per row that asked: the chosen token's logprob and the top-N alternatives (batched)."""
    result: list[TokenLogprob | None] = [None] * len(rows)
    wanted = [b for b, row in enumerate(rows) if row.params.logprobs is not None]
    if not wanted:
        return result
    values = torch.stack([_logprob_vector(b, rows[b], raw, processed, stages) for b in wanted]) \
        if any(rows[b].params.logprobs_mode == "processed" for b in wanted) \
        else raw[torch.tensor(wanted)].log_softmax(dim=-1)  # [W, V]
    chosen = values.gather(1, torch.tensor([[token_ids[b]] for b in wanted], device=values.device)).squeeze(1).tolist()
    most = max(rows[b].params.logprobs for b in wanted)
    top = values.topk(most, dim=-1) if most else None
    top_ids = top.indices.tolist() if top is not None else [[] for _ in wanted]
    top_values = top.values.tolist() if top is not None else [[] for _ in wanted]
    for i, b in enumerate(wanted):
        n = rows[b].params.logprobs
        result[b] = TokenLogprob(token_ids[b], chosen[i], dict(zip(top_ids[i][:n], top_values[i][:n])))
    return result


def _logprob_vector(b: int, row: SamplingRow, raw: torch.Tensor, processed: torch.Tensor,
                    stages: FilterStages | None) -> torch.Tensor:
    if row.params.logprobs_mode == "raw":
        return raw[b].log_softmax(dim=-1)
    if row.params.greedy or stages is None:
        return processed[b].log_softmax(dim=-1)
    return stages.final[b].log()


def step_traces(raw: torch.Tensor, processed: torch.Tensor, stages: FilterStages | None,
                rows: Sequence[SamplingRow], token_ids: list[int]) -> list[StepTrace | None]:
    result: list[StepTrace | None] = [None] * len(rows)
    for b, row in enumerate(rows):
        if row.params.trace:
            result[b] = _trace_row(b, row, raw, processed, stages, token_ids[b])
    return result


def _trace_row(b: int, row: SamplingRow, raw: torch.Tensor, processed: torch.Tensor,
               stages: FilterStages | None, chosen: int) -> StepTrace:
    params = row.params
    raw_probs = raw[b].softmax(dim=-1)
    candidates = raw_probs.topk(min(params.trace, raw_probs.shape[-1])).indices.tolist()
    if chosen not in candidates:
        candidates.append(chosen)
    if params.greedy or stages is None:
        # T = 0: only the argmax of the processed logits survives.
        scaled = processed[b].softmax(dim=-1)
        final = torch.zeros_like(scaled)
        final[chosen] = 1.0
        kept = torch.zeros_like(scaled, dtype=torch.bool)
        kept[chosen] = True
        kept_k = kept_p = kept_min = kept
    else:
        scaled, final = stages.scaled_probs[b], stages.final[b]
        kept_k, kept_p, kept_min = stages.kept_top_k[b], stages.kept_top_p[b], stages.kept_min_p[b]
    index = torch.tensor(candidates)
    columns = zip(index.tolist(), raw[b][index].tolist(), raw_probs[index].tolist(), scaled[index].tolist(),
                  kept_k[index].tolist(), kept_p[index].tolist(), kept_min[index].tolist(), final[index].tolist())
    return StepTrace(
        chosen_token_id=chosen,
        candidates=[TraceCandidate(*column) for column in columns],
        nucleus_size=int(kept_p.sum()),
        num_kept=int((final > 0).sum()),
        temperature=params.temperature, top_k=params.top_k, top_p=params.top_p, min_p=params.min_p,
        greedy=params.greedy,
    )
