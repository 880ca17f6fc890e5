"""What a generation returns: RequestOutput holding one CompletionOutput per choice."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class FinishReason(str, Enum):
    """Why a choice ended. The values are the OpenAI API's strings, plus our "timeout"."""

    STOP = "stop"  # EOS, a stop token id or a stop string
    LENGTH = "length"  # max_tokens or the context window
    ABORT = "abort"  # cancelled by the caller (client disconnect, abort())
    TIMEOUT = "timeout"  # the request's wall-clock deadline passed

    def __str__(self) -> str:
        return self.value


@dataclass
class TokenLogprob:
    """Log-probability of the chosen token and of the top alternatives at one step."""

    token_id: int
    logprob: float
    top: dict[int, float] = field(default_factory=dict)  # token id -> logprob, most likely first


@dataclass
class TraceCandidate:
    """One candidate token at one step, followed through the sampler."""

    token_id: int
    logit: float  # the model's raw score
    raw_prob: float  # softmax of the raw logits (the model's own distribution)
    scaled_prob: float  # after penalties/bias and temperature, before any filter
    kept_top_k: bool
    kept_top_p: bool
    kept_min_p: bool
    final_prob: float  # the probability it was actually drawn with (0 if filtered out)
    text: str = ""  # the token's text, filled in by the engine


@dataclass
class StepTrace:
    """What the sampler saw and did for one generated token (SamplingParams.trace > 0)."""

    chosen_token_id: int
    candidates: list[TraceCandidate]  # the top `trace` tokens by raw probability, and the chosen one
    nucleus_size: int  # tokens top-p kept (after top-k); the vocabulary size when top-p is off
    num_kept: int  # tokens left with non-zero probability after every filter
    temperature: float
    top_k: int
    top_p: float
    min_p: float
    greedy: bool


@dataclass
class CompletionOutput:
    """One choice of a request. In a streamed output `text` and `token_ids` hold only the delta."""

    index: int
    text: str
    token_ids: list[int]
    finish_reason: FinishReason | None = None
    stop_reason: str | int | None = None  # the stop string or token id that matched, if any
    logprobs: list[TokenLogprob] | None = None
    logprobs_mode: str | None = None  # "raw" or "processed": which distribution `logprobs` is from
    trace: list[StepTrace] | None = None  # per-step sampler trace, when asked for

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class RequestOutput:
    """The state of one request: its prompt and its choices (full, or deltas when streaming)."""

    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool = False
    num_cached_tokens: int = 0  # prompt tokens whose KV came from the prefix cache
