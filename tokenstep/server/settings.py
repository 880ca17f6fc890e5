"""ServerSettings: every limit and default of the HTTP server, fixed at start-up (never read from the
environment deep inside request handling), and the model name clients see in /v1/models."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from tokenstep.model.default import DEFAULT_MODEL_FILE
from tokenstep.params import SamplingParams

DEFAULT_HOST = "127.0.0.1"  # loopback: exposing the server is a deliberate choice (--host 0.0.0.0)
DEFAULT_PORT = 8000
DEFAULT_MAX_BODY_BYTES = 2 * 1024 * 1024  # 2 MiB: a long prompt fits; a memory-exhaustion upload does not
DEFAULT_MAX_N = 16  # choices per request; an unbounded n is a known out-of-memory attack (PEERS.md #14)
DEFAULT_CHAT_MAX_TOKENS = 512  # chat's max_tokens when the request gives none (see docs/server.md)
DEFAULT_MAX_WAITING = 256  # requests queued in the engine before new ones get 429
DEFAULT_DRAIN_TIMEOUT_S = 30.0  # SIGTERM: how long in-flight requests may finish before they are cancelled
MAX_HEADER_BYTES = 16 * 1024  # request line + headers, enforced by uvicorn's h11 parser
RETRY_AFTER_S = 1  # the Retry-After header of a 429
# A GGUF file name ends in its quantisation ("SmolLM2-135M-Instruct.Q4_1.gguf"); the model's name is
# what comes before it.
GGUF_QUANT_SUFFIX = re.compile(r"\.(?:I?Q\d\w*|F16|F32|BF16|f16|f32|bf16)$")


@dataclass(frozen=True)
class ServerSettings:
    """How the server behaves; built once by `tokenstep serve` (or a test) and put on app.state."""

    model_name: str
    """The one model id this server answers to (/v1/models, the `model` field of every request)."""
    api_key: str | None = None
    """When set, every route but /health needs `Authorization: Bearer <api_key>`."""
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    """Request bodies larger than this get 413 before they are parsed."""
    max_n: int = DEFAULT_MAX_N
    """Largest `n` a request may ask for."""
    chat_max_tokens: int = DEFAULT_CHAT_MAX_TOKENS
    """Chat's max_tokens when the request gives none, capped to what fits in the context window."""
    sampling_defaults: dict[str, Any] = field(default_factory=dict)
    """Server-wide SamplingParams defaults (`--default NAME=VALUE`): above the model's
    generation_config.json, below the request."""
    drain_timeout: float = DEFAULT_DRAIN_TIMEOUT_S
    """On SIGTERM, seconds in-flight requests get to finish before they are cancelled."""

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "max_n", "chat_max_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if not self.drain_timeout >= 0:
            raise ValueError(f"drain_timeout must be >= 0 seconds, got {self.drain_timeout!r}")
        if "max_tokens" in self.sampling_defaults:
            raise ValueError("set the default max_tokens with --max-tokens-default (chat) instead of --default")
        SamplingParams(**self.sampling_defaults)  # a bad default fails at start-up, naming its field


def parse_sampling_defaults(items: list[str]) -> dict[str, Any]:
    """`--default NAME=VALUE` flags -> {name: value}; VALUE is JSON (0.7, true, ["a"]) or else a string."""
    names = {f.name for f in fields(SamplingParams)}
    defaults: dict[str, Any] = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or name not in names:
            raise ValueError(f"--default takes NAME=VALUE with NAME a sampling parameter "
                             f"({', '.join(sorted(names))}), got {item!r}")
        try:
            defaults[name] = json.loads(text)
        except json.JSONDecodeError:
            defaults[name] = text
    return defaults


def model_name_from_path(model: str | None) -> str:
    """The id /v1/models reports: the folder name of an HF directory, the file name of a GGUF without
    its quantisation suffix; the bundled default is "SmolLM2-135M-Instruct"."""
    if model is None:
        return _strip_gguf(DEFAULT_MODEL_FILE)
    path = Path(model)
    name = path.name or path.resolve().name
    return _strip_gguf(name) if name.lower().endswith(".gguf") else name


def _strip_gguf(file_name: str) -> str:
    stem = file_name[: -len(".gguf")]
    return GGUF_QUANT_SUFFIX.sub("", stem) or stem
