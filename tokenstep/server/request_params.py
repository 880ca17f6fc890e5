"""A request's sampling fields -> SamplingParams, with one stated precedence and a record of it.

Precedence, per field: request > server flag (`--default NAME=VALUE`, chat's `--max-tokens-default`)
> the model's generation_config.json > SamplingParams' own default (`params.resolve_sampling_params`).
The one adjustment: a max_tokens the request did *not* give is capped to the room the prompt leaves
in the context window; a max_tokens the request gave that does not fit is a 400 naming both numbers.
The `explain` block reports every field's effective value and source, and any cap.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from tokenstep.params import SamplingParams, resolve_sampling_params
from tokenstep.server.errors import bad_request, from_value_error
from tokenstep.server.protocol import REQUEST_FIELDS, ChatCompletionRequest, CompletionRequest
from tokenstep.server.settings import ServerSettings

# Request fields that are SamplingParams fields under the same name, on both endpoints.
SHARED_FIELDS = ("n", "temperature", "top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty",
                 "frequency_penalty", "logit_bias", "seed", "min_tokens", "stop", "stop_token_ids", "ignore_eos",
                 "logprobs_mode", "skip_special_tokens", "include_stop_str_in_output", "timeout", "trace")
CAPPED_NOTE = "capped to the room the prompt leaves in the context window"


@dataclass(frozen=True)
class SamplingRequest:
    """The sampling part of a request, in SamplingParams' vocabulary (None = not given)."""

    values: dict[str, Any]
    renames: dict[str, str]  # SamplingParams field -> the request field it came from, where they differ
    server_max_tokens: int | None  # the endpoint's server default for max_tokens (chat), if any


def completion_sampling(request: CompletionRequest) -> SamplingRequest:
    if request.echo and request.logprobs is not None:
        raise bad_request("echo with logprobs is not supported: the engine computes no prompt logprobs", "echo")
    values = {name: getattr(request, name) for name in SHARED_FIELDS}
    values.update(max_tokens=request.max_tokens, logprobs=request.logprobs)
    return SamplingRequest(values, {}, None)


def chat_sampling(request: ChatCompletionRequest, settings: ServerSettings) -> SamplingRequest:
    if request.max_tokens is not None and request.max_completion_tokens is not None:
        raise bad_request("give max_completion_tokens or max_tokens (deprecated), not both", "max_tokens")
    if request.top_logprobs is not None and not request.logprobs:
        raise bad_request("top_logprobs needs logprobs: true", "top_logprobs")
    renames = {"logprobs": "top_logprobs"}
    max_tokens = request.max_tokens
    if request.max_completion_tokens is not None:
        max_tokens = request.max_completion_tokens
        renames["max_tokens"] = "max_completion_tokens"
    values = {name: getattr(request, name) for name in SHARED_FIELDS}
    values.update(max_tokens=max_tokens, logprobs=(request.top_logprobs or 0) if request.logprobs else None)
    return SamplingRequest(values, renames, settings.chat_max_tokens)


def build_params(sampling: SamplingRequest, settings: ServerSettings, generation_config: dict,
                 num_prompt_tokens: int, max_model_len: int, prompt_param: str) -> tuple[SamplingParams, dict]:
    """SamplingParams for one prompt, and the `explain` record of every field: {value, source}."""
    values = sampling.values
    n = values.get("n")
    if isinstance(n, int) and n > settings.max_n:
        raise bad_request(f"n must be <= {settings.max_n} (the server's --max-n), got {n}", "n")
    room = max_model_len - num_prompt_tokens
    if room <= 0:
        raise bad_request(f"the prompt has {num_prompt_tokens} tokens but the context window is {max_model_len}; "
                          f"shorten the prompt", prompt_param, "context_length_exceeded")
    max_tokens_param = sampling.renames.get("max_tokens", "max_tokens")
    max_tokens = values.get("max_tokens")
    if isinstance(max_tokens, int) and max_tokens > room:
        raise bad_request(f"prompt ({num_prompt_tokens} tokens) + {max_tokens_param} ({max_tokens}) exceeds the "
                          f"context window ({max_model_len}); lower {max_tokens_param} to at most {room}",
                          max_tokens_param, "context_length_exceeded")
    server_layer = dict(settings.sampling_defaults)
    if sampling.server_max_tokens is not None:
        server_layer["max_tokens"] = sampling.server_max_tokens
    try:
        params, sources = resolve_sampling_params(values, server_layer, generation_config)
        capped = sources["max_tokens"] != "request" and (params.max_tokens is None or params.max_tokens > room)
        if capped:
            params = dataclasses.replace(params, max_tokens=room)
    except ValueError as error:
        raise from_value_error(error, REQUEST_FIELDS, sampling.renames) from None
    explain = {name: {"value": getattr(params, name), "source": source} for name, source in sources.items()}
    if capped:
        explain["max_tokens"]["note"] = CAPPED_NOTE
    return params, explain
