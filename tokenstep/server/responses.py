"""Response bodies of the OpenAI API as pydantic models, fields in OpenAI's order. Our extensions
(`stop_reason`, `logprobs_mode`, `trace`, `explain`) come last and are left out of the JSON when
empty, so a client that knows only OpenAI sees only OpenAI."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field


def _extension() -> Any:
    return Field(default=None, exclude_if=lambda value: value is None)


class PromptTokensDetails(BaseModel):
    cached_tokens: int = 0
    """Prompt tokens whose KV came from the prefix cache."""


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails | None = None


class CompletionLogprobs(BaseModel):
    tokens: list[str] = Field(default_factory=list)
    token_logprobs: list[float] = Field(default_factory=list)
    top_logprobs: list[dict[str, float]] = Field(default_factory=list)
    text_offset: list[int] = Field(default_factory=list)


class CompletionChoice(BaseModel):
    index: int
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: str | None = None
    # ---- tokenstep extensions ----
    stop_reason: str | int | None = _extension()
    logprobs_mode: str | None = _extension()
    trace: list[dict[str, Any]] | None = _extension()


class Completion(BaseModel):
    """A /v1/completions response, and (same object name, as OpenAI) each of its stream chunks."""

    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None
    # ---- tokenstep extensions ----
    explain: dict[str, Any] | None = _extension()


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None = None


class TokenLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None = None
    top_logprobs: list[TopLogprob] = Field(default_factory=list)


class ChatLogprobs(BaseModel):
    content: list[TokenLogprob] | None = None
    refusal: list[TokenLogprob] | None = None


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None = None
    refusal: str | None = None


class ChatChoice(BaseModel):
    index: int
    message: AssistantMessage
    logprobs: ChatLogprobs | None = None
    finish_reason: str | None = None
    # ---- tokenstep extensions ----
    stop_reason: str | int | None = _extension()
    logprobs_mode: str | None = _extension()
    trace: list[dict[str, Any]] | None = _extension()


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage | None = None
    # ---- tokenstep extensions ----
    explain: dict[str, Any] | None = _extension()


class Delta(BaseModel):
    role: Literal["assistant"] | None = Field(default=None, exclude_if=lambda value: value is None)
    content: str | None = None


class ChatChunkChoice(BaseModel):
    index: int
    delta: Delta
    logprobs: ChatLogprobs | None = None
    finish_reason: str | None = None
    # ---- tokenstep extensions ----
    stop_reason: str | int | None = _extension()
    logprobs_mode: str | None = _extension()
    trace: list[dict[str, Any]] | None = _extension()


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChatChunkChoice]
    usage: Usage | None = None
    # ---- tokenstep extensions ----
    explain: dict[str, Any] | None = _extension()


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "tokenstep"
    # ---- tokenstep extensions ----
    max_model_len: int | None = _extension()


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]
