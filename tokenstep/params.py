"""SamplingParams: everything a request says about how to pick its tokens and when to stop.

Field names and meanings follow the OpenAI API and vLLM, so a request translates one-to-one. Every
field is validated once, at construction, with an error that names the field and its allowed range.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Literal

MAX_LOGPROBS = 20  # OpenAI's limit on top_logprobs
MAX_LOGIT_BIAS = 100.0  # OpenAI's range for logit_bias values: [-100, 100]
MAX_ADDITIVE_PENALTY = 2.0  # OpenAI's range for presence/frequency penalties: [-2, 2]
MAX_TRACE = 100  # candidates per step in a trace; more is a page, not an inspection


@dataclass
class SamplingParams:
    """How to sample one request. Defaults match the OpenAI API unless stated."""

    n: int = 1
    """Number of independent choices to generate for the prompt. Range: >= 1. Default 1."""
    temperature: float = 1.0
    """Divides the logits before softmax. < 1 sharpens, > 1 flattens; 0 means greedy (argmax), the
    API convention. Range: >= 0. Default 1.0."""
    top_p: float = 1.0
    """Nucleus sampling: keep the smallest set of tokens whose cumulative probability is >= top_p.
    Range: (0, 1]. Default 1.0 (off)."""
    top_k: int = 0
    """Keep only the k most probable tokens. 0 or -1 = off. Range: -1 or >= 0. Default 0."""
    min_p: float = 0.0
    """Drop tokens whose probability is below min_p times the top token's. Range: [0, 1]. Default 0."""
    repetition_penalty: float = 1.0
    """HF's multiplicative penalty on tokens already in the prompt or output: positive logits are
    divided by it, negative ones multiplied. Range: > 0. Default 1.0 (off)."""
    presence_penalty: float = 0.0
    """OpenAI's additive penalty: subtracted once from every token already generated.
    Range: [-2, 2]. Default 0."""
    frequency_penalty: float = 0.0
    """OpenAI's additive penalty: subtracted once per earlier occurrence in the output.
    Range: [-2, 2]. Default 0."""
    logit_bias: dict[int, float] | None = None
    """Token id -> value added to its logit before sampling. Values in [-100, 100]. Default none."""
    seed: int | None = None
    """Seed of this request's random stream; the draw at position i depends only on
    (seed, choice index, i). None = a fresh random seed per request. Range: any int >= 0."""
    max_tokens: int | None = 16
    """Most tokens to generate (finish_reason "length"). None = up to the context window.
    Range: >= 1. Default 16 (OpenAI's completions default)."""
    min_tokens: int = 0
    """EOS, stop_token_ids and stop strings are ignored until this many tokens exist. Range: >= 0."""
    stop: list[str] = field(default_factory=list)
    """Strings that end generation when they appear in the output text (excluded from the text)."""
    stop_token_ids: list[int] = field(default_factory=list)
    """Token ids that end generation, in addition to the model's EOS ids."""
    ignore_eos: bool = False
    """Keep generating after EOS (for benchmarks). Default False."""
    logprobs: int | None = None
    """Return the chosen token's logprob and this many top alternatives per step. Range: 0..20."""
    logprobs_mode: Literal["raw", "processed"] = "raw"
    """"raw": logprobs of the model's own distribution (default); "processed": of the distribution
    actually sampled from, after penalties, temperature and filters."""
    skip_special_tokens: bool = True
    """Leave special tokens (EOS, chat markers) out of the output text. Default True."""
    include_stop_str_in_output: bool = False
    """Keep the matched stop string at the end of the text. Default False."""
    timeout: float | None = None
    """Wall-clock seconds from arrival after which the request ends with finish_reason "timeout".
    Range: > 0. Default none."""
    trace: int = 0
    """Record this many top candidates of every step's distribution (the inspector). 0..100."""

    def __post_init__(self) -> None:
        self.stop = [self.stop] if isinstance(self.stop, str) else _as_list("stop", self.stop, "non-empty strings")
        self.stop_token_ids = _as_list("stop_token_ids", self.stop_token_ids, "token ids >= 0")
        if self.top_k == -1 and isinstance(self.top_k, int):  # not -1.0: a float is refused below
            self.top_k = 0
        self._validate()

    @property
    def greedy(self) -> bool:
        """True when the token is the argmax (temperature 0)."""
        return self.temperature == 0.0

    def _validate(self) -> None:
        _check_int("n", self.n, 1)
        _check_float("temperature", self.temperature, "must be >= 0", lambda v: v >= 0)
        _check_float("top_p", self.top_p, "must be in (0, 1]", lambda v: 0 < v <= 1)
        _check_int("top_k", self.top_k, 0, "must be -1, 0 (off) or a positive integer")
        _check_float("min_p", self.min_p, "must be in [0, 1]", lambda v: 0 <= v <= 1)
        _check_float("repetition_penalty", self.repetition_penalty, "must be > 0", lambda v: v > 0)
        for name in ("presence_penalty", "frequency_penalty"):
            _check_float(name, getattr(self, name), "must be in [-2, 2]",
                         lambda v: abs(v) <= MAX_ADDITIVE_PENALTY)
        self._validate_logit_bias()
        if self.seed is not None:
            _check_int("seed", self.seed, 0)
        if self.max_tokens is not None:
            _check_int("max_tokens", self.max_tokens, 1)
        _check_int("min_tokens", self.min_tokens, 0)
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            raise ValueError(f"min_tokens ({self.min_tokens}) must be <= max_tokens ({self.max_tokens})")
        if not all(isinstance(s, str) and s for s in self.stop):
            raise ValueError("stop must be a list of non-empty strings")
        for token_id in self.stop_token_ids:
            _check_int("stop_token_ids", token_id, 0, "must be a list of token ids >= 0")
        if self.logprobs is not None:
            _check_int("logprobs", self.logprobs, 0, f"must be in [0, {MAX_LOGPROBS}]", MAX_LOGPROBS)
        if self.logprobs_mode not in ("raw", "processed"):
            raise ValueError("logprobs_mode must be 'raw' or 'processed'")
        if self.timeout is not None:
            _check_float("timeout", self.timeout, "must be > 0 seconds", lambda v: v > 0)
        _check_int("trace", self.trace, 0, f"must be in [0, {MAX_TRACE}]", MAX_TRACE)
        for name in ("ignore_eos", "skip_special_tokens", "include_stop_str_in_output"):
            if not isinstance(getattr(self, name), bool):  # "false" or 0 must not pass as a switch
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")

    def _validate_logit_bias(self) -> None:
        if self.logit_bias is None:
            return
        if not isinstance(self.logit_bias, dict):
            raise ValueError("logit_bias must be a mapping of token id to a value in [-100, 100]")
        bias: dict[int, float] = {}
        for key, value in self.logit_bias.items():
            try:
                token_id = int(key)
            except (TypeError, ValueError):
                raise ValueError(f"logit_bias keys must be token ids (integers >= 0), got {key!r}") from None
            if token_id < 0 or str(token_id) != str(key).strip():
                raise ValueError(f"logit_bias keys must be token ids (integers >= 0), got {key!r}")
            _check_float("logit_bias", value, "values must be in [-100, 100]",
                         lambda v: abs(v) <= MAX_LOGIT_BIAS)
            bias[token_id] = float(value)
        self.logit_bias = bias


def _as_list(name: str, value: object, items: str) -> list:
    # None -> []; a list or tuple is copied; anything else (5, 0, True, a dict...) is refused.
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"{name} must be a list of {items}, got {value!r}")
    return list(value)


def _check_float(name: str, value: object, rule: str, ok) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number ({rule}), got {value!r}")
    if not ok(value):
        raise ValueError(f"{name} {rule}, got {value!r}")


def _check_int(name: str, value: object, low: int, rule: str | None = None, high: int | None = None) -> None:
    rule = rule or f"must be an integer >= {low}"
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} {rule}, got {value!r}")
    if value < low or (high is not None and value > high):
        raise ValueError(f"{name} {rule}, got {value!r}")


# generation_config.json key -> SamplingParams field: the sampling defaults a model ships with.
GENERATION_CONFIG_FIELDS = {
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "min_p": "min_p",
    "repetition_penalty": "repetition_penalty",
    "max_new_tokens": "max_tokens",
}


def generation_config_defaults(generation_config: dict) -> dict[str, object]:
    """The SamplingParams fields a model's generation_config.json sets (do_sample=false -> T = 0)."""
    values = {field: generation_config[key] for key, field in GENERATION_CONFIG_FIELDS.items()
              if generation_config.get(key) is not None}
    if generation_config.get("do_sample") is False:
        values["temperature"] = 0.0
    return values


def resolve_sampling_params(request: dict[str, object], server_defaults: dict[str, object] | None = None,
                            generation_config: dict | None = None) -> tuple[SamplingParams, dict[str, str]]:
    """SamplingParams with the stated precedence: request > server flag > the model's
    generation_config.json > SamplingParams' own default. Returns the params and, per field,
    where its value came from ("request", "server", "generation_config" or "default")."""
    layers = [("default", {}), ("generation_config", generation_config_defaults(generation_config or {})),
              ("server", dict(server_defaults or {})), ("request", {k: v for k, v in request.items() if v is not None})]
    values: dict[str, object] = {}
    sources = {f.name: "default" for f in fields(SamplingParams)}
    for source, layer in layers:
        for name, value in layer.items():
            values[name] = value
            sources[name] = source
    return SamplingParams(**values), sources
