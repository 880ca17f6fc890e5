"""Request bodies of the OpenAI API as pydantic models: fields in the order of OpenAI's API reference,
then our extensions (vLLM's names where vLLM has one), fenced off below a marker.

Types are strict (a string is not a number, 1 is not True, NaN is not a float) and unknown fields
are refused, so a typo never becomes a silent default. Ranges are checked once, by SamplingParams;
here live only the limits of the server itself (how many stops, how long, how many prompts).
Fields typed `None` are parts of OpenAI's API this server does not implement: sending them null is
fine, sending a value is a 400 that says so. Response bodies are in `server/responses.py`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from tokenstep.params import MAX_LOGPROBS

MAX_STOPS = 4  # OpenAI's limit on `stop`
MAX_STOP_CHARS = 256  # a stop string longer than this is a mistake (and would hold the stream back)
MAX_LOGIT_BIAS_ENTRIES = 300  # the limit OpenAI's API enforces
MAX_STOP_TOKEN_IDS = 64
MAX_PROMPTS = 64  # prompts in one /v1/completions request
MAX_MESSAGES = 1024

StopString = Annotated[str, StringConstraints(max_length=MAX_STOP_CHARS)]
Stop = StopString | Annotated[list[StopString], Field(max_length=MAX_STOPS)]
Prompt = (str | Annotated[list[str], Field(min_length=1, max_length=MAX_PROMPTS)]
          | Annotated[list[int], Field(min_length=1)]
          | Annotated[list[list[int]], Field(min_length=1, max_length=MAX_PROMPTS)])
LogitBias = Annotated[dict[str, float], Field(max_length=MAX_LOGIT_BIAS_ENTRIES)]
StopTokenIds = Annotated[list[int], Field(max_length=MAX_STOP_TOKEN_IDS)]

# Why a field typed `None` is refused when it has a value (the 400's message).
REFUSED = {
    "chat_template": "request-supplied chat templates are refused: the server renders only the model's own",
    "chat_template_kwargs": "request-supplied chat template arguments are refused",
}
REFUSED_DEFAULT = "is not supported by this server"
# What a field that takes several shapes accepts (pydantic's per-branch messages are unreadable).
SHAPES = {
    "prompt": f"must be a non-empty string, a list of up to {MAX_PROMPTS} strings, a list of token ids, or a list "
              "of lists of token ids",
    "stop": f"must be a string or a list of up to {MAX_STOPS} strings, each at most {MAX_STOP_CHARS} characters",
    "content": "must be a string or a list of text parts ({\"type\": \"text\", \"text\": ...})",
}


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)


class StreamOptions(_Strict):
    include_usage: bool = False
    """Send a last chunk with `choices: []` and the request's token usage."""


class _Extensions(_Strict):
    """Our fields, shared by both endpoints (SamplingParams names; see docs/sampling.md)."""

    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    min_tokens: int | None = None
    stop_token_ids: StopTokenIds | None = None
    ignore_eos: bool | None = None
    include_stop_str_in_output: bool | None = None
    skip_special_tokens: bool | None = None
    logprobs_mode: Literal["raw", "processed"] | None = None
    trace: int | None = None
    """Per-step sampler trace: this many top candidates of every step (0..100)."""
    timeout: float | None = None
    """Wall-clock deadline in seconds -> finish_reason "timeout"."""
    explain: bool = False
    """Add an `explain` block: every sampling parameter's effective value and its source."""


class CompletionRequest(_Extensions):
    """POST /v1/completions."""

    model: str
    prompt: Prompt
    best_of: None = None
    echo: bool = False
    frequency_penalty: float | None = None
    logit_bias: LogitBias | None = None
    logprobs: Annotated[int, Field(ge=0, le=MAX_LOGPROBS)] | None = None
    max_tokens: int | None = None
    n: int | None = None
    presence_penalty: float | None = None
    seed: int | None = None
    stop: Stop | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    suffix: None = None
    temperature: float | None = None
    top_p: float | None = None
    user: str | None = None
    # ---- tokenstep extensions: see _Extensions ----


class TextPart(_Strict):
    type: Literal["text"]
    text: str


class ChatMessage(_Strict):
    """One turn. Keys OpenAI's own responses carry (refusal, tool_calls, ...) are ignored, so a
    reply can be appended to the conversation as the client returned it."""

    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(part.text for part in self.content)
        return self.content or ""


class ResponseFormat(_Strict):
    type: Literal["text"]


class ChatCompletionRequest(_Extensions):
    """POST /v1/chat/completions."""

    messages: Annotated[list[ChatMessage], Field(min_length=1, max_length=MAX_MESSAGES)]
    model: str
    frequency_penalty: float | None = None
    function_call: None = None
    functions: None = None
    logit_bias: LogitBias | None = None
    logprobs: bool = False
    max_completion_tokens: int | None = None
    max_tokens: int | None = None
    n: int | None = None
    parallel_tool_calls: None = None
    presence_penalty: float | None = None
    response_format: ResponseFormat | None = None
    seed: int | None = None
    stop: Stop | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    temperature: float | None = None
    tool_choice: None = None
    tools: None = None
    top_logprobs: Annotated[int, Field(ge=0, le=MAX_LOGPROBS)] | None = None
    top_p: float | None = None
    user: str | None = None
    # ---- tokenstep extensions: see _Extensions, plus the refused template fields ----
    chat_template: None = None
    chat_template_kwargs: None = None


def field_names(*models: type[BaseModel]) -> frozenset[str]:
    """Every field name of the given models (for naming `param` in error bodies)."""
    return frozenset(name for model in models for name in model.model_fields)


REQUEST_FIELDS = field_names(CompletionRequest, ChatCompletionRequest, ChatMessage, TextPart, StreamOptions,
                             ResponseFormat)
