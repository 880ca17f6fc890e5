"""Frozen configuration dataclasses: what the model is, and how the engine runs it.

`ModelConfig` is built once from a checkpoint's `config.json` (or the equivalent GGUF metadata) and
normalises the spellings that differ between architectures and transformers versions, so model code
reads one vocabulary (`num_kv_heads`, `head_dim`, `rope`...).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# transformers' defaults where a config.json leaves a field out.
DEFAULT_ROPE_THETA = 10000.0
DEFAULT_RMS_NORM_EPS = 1e-6
DEFAULT_LAYER_NORM_EPS = 1e-5


@dataclass(frozen=True)
class RopeConfig:
    """Rotary position embedding parameters (`rope_type` "default" or "llama3")."""

    theta: float = DEFAULT_ROPE_THETA
    rope_type: str = "default"
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192

    @classmethod
    def from_hf(cls, hf: dict[str, Any]) -> RopeConfig:
        # transformers >= 5 writes `rope_parameters`; older files write `rope_theta` + `rope_scaling`.
        params = dict(hf.get("rope_scaling") or {})
        params.update(hf.get("rope_parameters") or {})
        rope_type = params.get("rope_type", params.get("type", "default"))
        if rope_type not in ("default", "llama3"):
            raise ValueError(f"unsupported rope_scaling type {rope_type!r}; supported: 'default', 'llama3'")
        return cls(
            theta=float(params.get("rope_theta", hf.get("rope_theta", DEFAULT_ROPE_THETA))),
            rope_type=rope_type,
            factor=float(params.get("factor", 1.0)),
            low_freq_factor=float(params.get("low_freq_factor", 1.0)),
            high_freq_factor=float(params.get("high_freq_factor", 4.0)),
            original_max_position_embeddings=int(params.get("original_max_position_embeddings", 8192)),
        )


@dataclass(frozen=True)
class ModelConfig:
    """The shape of a decoder-only transformer, in one vocabulary for every architecture."""

    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    max_position_embeddings: int
    norm_eps: float
    tie_word_embeddings: bool
    hidden_act: str = "silu"
    rope: RopeConfig = field(default_factory=RopeConfig)
    attention_bias: bool = False  # q/k/v projections carry a bias (Qwen2)
    attention_out_bias: bool = False  # o_proj carries a bias (Llama attention_bias=True)
    mlp_bias: bool = False
    qk_norm: bool = False  # RMSNorm on each head of q and k before RoPE (Qwen3)
    sliding_window: int | None = None  # keys older than this many positions are not attended
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()

    @classmethod
    def from_hf(cls, hf: dict[str, Any]) -> ModelConfig:
        """Normalise an HF `config.json` dict (architecture already validated by the registry)."""
        arch = hf["architectures"][0]
        if arch == "GPT2LMHeadModel":
            return cls._from_gpt2(hf)
        num_heads = hf["num_attention_heads"]
        head_dim = hf.get("head_dim") or hf["hidden_size"] // num_heads
        attention_bias = bool(hf.get("attention_bias", False))
        is_qwen2 = arch == "Qwen2ForCausalLM"
        return cls(
            architecture=arch,
            vocab_size=hf["vocab_size"],
            hidden_size=hf["hidden_size"],
            intermediate_size=hf["intermediate_size"],
            num_layers=hf["num_hidden_layers"],
            num_heads=num_heads,
            num_kv_heads=hf.get("num_key_value_heads") or num_heads,
            head_dim=head_dim,
            max_position_embeddings=hf.get("max_position_embeddings", 2048),
            norm_eps=hf.get("rms_norm_eps", DEFAULT_RMS_NORM_EPS),
            tie_word_embeddings=bool(hf.get("tie_word_embeddings", False)),
            hidden_act=hf.get("hidden_act", "silu"),
            rope=RopeConfig.from_hf(hf),
            # Qwen2 always has q/k/v bias and never an o_proj bias; Llama's flag covers all four.
            attention_bias=True if is_qwen2 else attention_bias,
            attention_out_bias=False if is_qwen2 else attention_bias,
            mlp_bias=bool(hf.get("mlp_bias", False)),
            qk_norm=arch == "Qwen3ForCausalLM",
            sliding_window=_sliding_window(hf),
            bos_token_id=hf.get("bos_token_id"),
            eos_token_ids=_as_ids(hf.get("eos_token_id")),
        )

    @classmethod
    def _from_gpt2(cls, hf: dict[str, Any]) -> ModelConfig:
        hidden = hf["n_embd"]
        return cls(
            architecture="GPT2LMHeadModel",
            vocab_size=hf["vocab_size"],
            hidden_size=hidden,
            intermediate_size=hf.get("n_inner") or 4 * hidden,
            num_layers=hf["n_layer"],
            num_heads=hf["n_head"],
            num_kv_heads=hf["n_head"],
            head_dim=hidden // hf["n_head"],
            max_position_embeddings=hf["n_positions"],
            norm_eps=hf.get("layer_norm_epsilon", DEFAULT_LAYER_NORM_EPS),
            tie_word_embeddings=bool(hf.get("tie_word_embeddings", True)),
            hidden_act=hf.get("activation_function", "gelu_new"),
            bos_token_id=hf.get("bos_token_id"),
            eos_token_ids=_as_ids(hf.get("eos_token_id")),
        )


def _sliding_window(hf: dict[str, Any]) -> int | None:
    # Qwen2 only slides when asked to; Mistral slides whenever a window is set.
    if "use_sliding_window" in hf and not hf["use_sliding_window"]:
        return None
    window = hf.get("sliding_window")
    return int(window) if window else None


def _as_ids(value: int | list[int] | None) -> tuple[int, ...]:
    if value is None:
        return ()
    return tuple(value) if isinstance(value, (list, tuple)) else (int(value),)


@dataclass(frozen=True)
class EngineConfig:
    """How the engine runs a model: where, in which precision, with how much KV memory."""

    model: str | None = None
    """Path to an HF model directory or a .gguf file; None = the bundled default model."""
    dtype: str = "float32"
    """Compute dtype: "float32" or "bfloat16"."""
    device: str = "cpu"
    """torch device string ("cpu", "cuda", "cuda:1")."""
    max_model_len: int | None = None
    """Longest prompt + output in tokens; None = the model's max_position_embeddings."""
    max_num_seqs: int = 64
    """Most requests in the running batch at once."""
    max_num_batched_tokens: int = 2048
    """Token budget of one forward pass (prefill chunks + decode tokens)."""
    block_size: int = 16
    """Token slots per KV cache block."""
    enable_prefix_caching: bool = True
    """Reuse the KV blocks of earlier requests' identical prefixes (system prompts, chat history)."""
    kv_cache_memory: int | None = None
    """Bytes for the KV cache pool; None = enough for `max_num_seqs` full-length sequences, capped."""
    num_threads: int | None = None
    """torch intra-op threads on CPU; None = torch's default."""


def read_json_file(path: Path) -> dict[str, Any]:
    """A JSON config file as a dict; {} when absent, a one-line ValueError when malformed."""
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: invalid JSON ({error})") from None
