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
class CompletionOutput:
    """One choice of a request. In a streamed output `text` and `token_ids` hold only the delta."""

    index: int
    text: str
    token_ids: list[int]
    finish_reason: FinishReason | None = None
    stop_reason: str | int | None = None  # the stop string or token id that matched, if any
    logprobs: list[TokenLogprob] | None = None
    logprobs_mode: str | None = None  # "raw" or "processed": which distribution `logprobs` is from

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
