"""Request: all mutable state of one generation (one choice of a prompt)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import Enum

from tokenstep.outputs import FinishReason, StepTrace, TokenLogprob
from tokenstep.params import SamplingParams
from tokenstep.text.detokenizer import IncrementalDetokenizer


class RequestStatus(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass
class Request:
    request_id: str  # unique per choice: "<parent id>" or "<parent id>-<choice index>"
    parent_id: str  # the id the caller knows; choices of one prompt share it
    choice_index: int
    prompt: str | None
    prompt_token_ids: list[int]
    params: SamplingParams
    seed: int  # the effective seed (params.seed, or one drawn at arrival)
    eos_token_ids: frozenset[int]
    max_tokens: int  # effective: params.max_tokens capped by the context window
    detokenizer: IncrementalDetokenizer | None
    arrival_time: float = field(default_factory=time.monotonic)
    status: RequestStatus = RequestStatus.WAITING
    output_token_ids: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)
    traces: list[StepTrace] = field(default_factory=list)
    num_computed_tokens: int = 0  # tokens whose K/V are in the cache
    block_ids: list[int] = field(default_factory=list)
    block_hashes: list[bytes] = field(default_factory=list)  # chained hashes of full blocks (memo)
    num_registered_blocks: int = 0  # leading blocks already findable in the prefix cache
    num_cached_tokens: int = 0  # prompt tokens served from the prefix cache at first admission
    finish_reason: FinishReason | None = None
    stop_reason: str | int | None = None
    num_emitted_tokens: int = 0  # output tokens already reported (for streaming deltas)
    num_emitted_logprobs: int = 0
    num_emitted_traces: int = 0

    @property
    def all_token_ids(self) -> list[int]:
        return self.prompt_token_ids + self.output_token_ids

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def is_prefill(self) -> bool:
        """True while prompt tokens remain to be run (the next forward produces no sampled token
        unless it finishes the prompt)."""
        return self.num_computed_tokens < len(self.prompt_token_ids)

    @property
    def finished(self) -> bool:
        return self.status is RequestStatus.FINISHED
