"""The sampling lab: the sampler's arithmetic on a logits vector you choose, stage by stage.

`distribution()` is the sampler's own filter code (sampler.filter_stages) on one vector, in float64,
so what the lab shows is what sampling does. `exercise()` lays out the seeds' hand exercise: softmax,
cumulative sums, the top-k set and the nucleus (each on the T = 1 distribution, renormalised), the
temperature-reshaped distribution, and the final distribution of the whole pipeline.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from tokenstep.params import SamplingParams
from tokenstep.sampling.filters import FilterStages, filter_stages


def _stages(logits: torch.Tensor, temperature: float, top_k: int, top_p: float, min_p: float) -> FilterStages:
    row = logits[None]
    return filter_stages(row, torch.tensor([temperature], dtype=torch.float64), torch.tensor([top_k]),
                         torch.tensor([top_p], dtype=torch.float64), torch.tensor([min_p], dtype=torch.float64))


def _as_logits(logits: Sequence[float] | torch.Tensor) -> torch.Tensor:
    values = torch.as_tensor(logits, dtype=torch.float64).flatten()
    if values.numel() == 0 or not bool(torch.isfinite(values).all()):
        raise ValueError("logits must be a non-empty list of finite numbers")
    return values


def distribution(logits: Sequence[float] | torch.Tensor, temperature: float = 1.0, top_k: int = 0,
                 top_p: float = 1.0, min_p: float = 0.0) -> torch.Tensor:
    """The final probabilities the sampler draws from for `logits` (float64, same length).
    temperature=0 is greedy: all mass on the argmax."""
    SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p)  # validates ranges
    values = _as_logits(logits)
    if temperature == 0:
        return torch.nn.functional.one_hot(values.argmax(), values.numel()).double()
    return _stages(values, temperature, top_k, top_p, min_p).final[0]


@dataclass
class LabRow:
    label: str
    logit: float
    prob: float  # softmax at T = 1
    cumulative: float  # cumulative prob at T = 1, in descending order
    in_top_k: bool
    top_k_prob: float  # renormalised over the top-k set (T = 1)
    in_nucleus: bool
    nucleus_prob: float  # renormalised over the nucleus (T = 1)
    temperature_prob: float  # softmax(logits / T)
    final_prob: float  # the whole pipeline: T -> top-k -> top-p -> min-p


@dataclass
class LabResult:
    rows: list[LabRow]  # in descending order of logit
    temperature: float
    top_k: int
    top_p: float
    min_p: float
    greedy: str


def exercise(logits: Sequence[float], labels: Sequence[str] | None = None, temperature: float = 1.0,
             top_k: int = 0, top_p: float = 1.0, min_p: float = 0.0) -> LabResult:
    """Every column of the seeds' exercise for `logits` (see the module docstring)."""
    values = _as_logits(logits)
    labels = list(labels) if labels else [f"#{i}" for i in range(values.numel())]
    if len(labels) != values.numel():
        raise ValueError(f"{len(labels)} labels for {values.numel()} logits")
    final = distribution(values, temperature, top_k, top_p, min_p)
    plain = _stages(values, 1.0, top_k, 1.0, 0.0)
    nucleus = _stages(values, 1.0, 0, top_p, 0.0)
    reshaped = (values / temperature).softmax(-1) if temperature > 0 else final
    order = values.argsort(descending=True, stable=True).tolist()
    cumulative = plain.scaled_probs[0][order].cumsum(-1).tolist()
    rows = [LabRow(labels[i], float(values[i]), float(plain.scaled_probs[0][i]), cumulative[rank],
                   bool(plain.kept_top_k[0][i]), float(plain.final[0][i]), bool(nucleus.kept_top_p[0][i]),
                   float(nucleus.final[0][i]), float(reshaped[i]), float(final[i]))
            for rank, i in enumerate(order)]
    return LabResult(rows, temperature, top_k, top_p, min_p, greedy=labels[order[0]])
