"""Load llama-family GGUF files (llama.cpp's format): config, tokenizer and dequantized weights.

Everything is read with `gguf.GGUFReader` (a memory map plus plain struct parsing; nothing is
unpickled). Tensors are dequantized with `gguf.quants.dequantize` and renamed to transformers'
`LlamaForCausalLM` parameter names. llama.cpp's converter permutes the rows of the Q and K
projections (its RoPE pairs dimensions (2i, 2i+1), HF pairs (i, i + d/2)); that is undone here so
every tensor equals the one in the original HF checkpoint.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
import torch
from gguf import GGUFReader, ReaderTensor
from gguf.quants import dequantize
from tokenizers import Tokenizer

from tokenstep.text.gguf_vocab import build_tokenizer

# general.architecture -> (HF architectures entry, HF model_type). All share Llama's tensor layout.
SUPPORTED_ARCHITECTURES: Mapping[str, tuple[str, str]] = MappingProxyType({
    "llama": ("LlamaForCausalLM", "llama"),
    "mistral": ("MistralForCausalLM", "mistral"),
})
DEFAULT_ROPE_THETA = 10000.0
DEFAULT_CONTEXT_LENGTH = 2048
LLAMA3_ORIGINAL_CONTEXT = 8192  # Llama 3.x's pre-extension context; the converter's default too
LLAMA3_FIT_DECIMALS = 3  # rope_freqs are float32; low/high freq factors are small round numbers
LLAMA3_FIT_RTOL = 1e-4
ROPE_FREQS_TENSOR = "rope_freqs.weight"
OUTPUT_TENSOR = "output.weight"
TOKEN_KEY = "tokenizer.ggml."

# GGUF tensor name -> HF name; per-layer ones are matched after "blk.{i}.".
GLOBAL_TENSOR_NAMES: Mapping[str, str] = MappingProxyType({
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    OUTPUT_TENSOR: "lm_head.weight",
})
LAYER_TENSOR_NAMES: Mapping[str, str] = MappingProxyType({
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
})
LAYER_TENSOR_PATTERN = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)")
SKIPPED_TENSORS = frozenset({ROPE_FREQS_TENSOR})  # folded into config["rope_scaling"]


@dataclass(frozen=True)
class GGUFContents:
    """Everything in a GGUF file except the weights."""

    config: dict  # HF-style config.json dict
    tokenizer: Tokenizer
    chat_template: str | None
    bos_token: str | None
    eos_token: str | None
    eos_token_ids: tuple[int, ...]  # eos_token_id plus eot/eom ids if the file has them


class GGUFFile:
    """One parse of a GGUF file (the header is parsed once: ~2 s for a 49k-token vocabulary), from
    which the contents and the tensors are both read."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = path
        self.reader = _open_reader(path)
        self.metadata = _metadata(self.reader, path)
        self.arch = _architecture(self.metadata, path)

    def contents(self) -> GGUFContents:
        """The file's config, tokenizer and special tokens (no weights)."""
        path, metadata, arch = self.path, self.metadata, self.arch
        try:
            config = _build_config(metadata, self.reader, arch)
        except (KeyError, TypeError, ValueError) as exc:  # missing or ill-typed keys, odd rope_freqs
            raise ValueError(f"{path}: unusable {arch} metadata: {_one_line(exc)}") from exc
        try:
            tokenizer = build_tokenizer(metadata)
        except Exception as exc:  # a malformed vocabulary surfaces as many different errors
            raise ValueError(f"{path}: cannot build the tokenizer: {_one_line(exc)}") from exc
        tokens = metadata[TOKEN_KEY + "tokens"]
        eos_ids = [metadata.get(TOKEN_KEY + k) for k in ("eos_token_id", "eot_token_id", "eom_token_id")]
        return GGUFContents(
            config=config,
            tokenizer=tokenizer,
            chat_template=metadata.get("tokenizer.chat_template"),
            bos_token=_token(tokens, config["bos_token_id"]),
            eos_token=_token(tokens, config["eos_token_id"]),
            eos_token_ids=tuple(dict.fromkeys(i for i in eos_ids if _token(tokens, i) is not None)),
        )

    def tensors(self, dtype: torch.dtype) -> Iterator[tuple[str, torch.Tensor]]:
        """(HF parameter name, tensor in `dtype`) for every weight, dequantized with
        gguf.quants.dequantize, with llama.cpp's Q/K row permutation undone."""
        num_heads = self.metadata.get(f"{self.arch}.attention.head_count")
        if not isinstance(num_heads, int) or num_heads <= 0:
            raise ValueError(f"{self.path}: missing or invalid {self.arch}.attention.head_count")
        num_kv_heads = self.metadata.get(f"{self.arch}.attention.head_count_kv", num_heads)
        return _tensors(self.reader, self.path, dtype, {"attn_q": num_heads, "attn_k": int(num_kv_heads)})

    def num_tensors(self) -> int:
        """How many tensors `tensors()` yields (for a progress bar)."""
        return sum(_hf_name(t.name, self.path) is not None for t in self.reader.tensors)


def read_gguf(path: str | os.PathLike) -> GGUFContents:
    """Read a GGUF file's metadata and tokenizer (no weights; rope_freqs is the only tensor read)."""
    return GGUFFile(path).contents()


def iter_gguf_tensors(path: str | os.PathLike, dtype: torch.dtype) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield (HF parameter name, tensor in `dtype`) for every tensor of the file at `path`.
    The file is opened and validated now, so a bad file fails at the call, not at the first next()."""
    return GGUFFile(path).tensors(dtype)


def num_gguf_tensors(path: str | os.PathLike) -> int:
    """How many tensors `iter_gguf_tensors` yields (for a progress bar)."""
    return GGUFFile(path).num_tensors()


def _tensors(reader: GGUFReader, path: str | os.PathLike, dtype: torch.dtype,
             rope_heads: Mapping[str, int]) -> Iterator[tuple[str, torch.Tensor]]:
    """The generator behind `GGUFFile.tensors`; `rope_heads` gives the head count of Q and K."""
    for tensor in reader.tensors:
        name = _hf_name(tensor.name, path)
        if name is None:
            continue
        values = _dequantize(tensor, path)
        layer_match = LAYER_TENSOR_PATTERN.fullmatch(tensor.name)
        if layer_match and layer_match.group(2) in rope_heads:
            values = _unpermute_rope_rows(values, rope_heads[layer_match.group(2)])
        # A memory-mapped F32 tensor is read-only; torch needs its own writable copy anyway.
        array = np.require(values, dtype=np.float32, requirements=["C", "W"])
        yield name, torch.from_numpy(array).to(dtype)


def _open_reader(path: str | os.PathLike) -> GGUFReader:
    """A GGUFReader, with every parse failure turned into a one-line ValueError."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"GGUF file {str(path)!r} does not exist")
    try:
        return GGUFReader(path)
    except Exception as exc:  # the reader raises ValueError, IndexError, struct errors... on bad input
        raise ValueError(f"{path}: not a valid GGUF file (truncated or corrupt?): {_one_line(exc)}") from exc


def _metadata(reader: GGUFReader, path: str | os.PathLike) -> dict[str, Any]:
    """Every key/value pair as plain Python values."""
    try:
        return {key: field.contents() for key, field in reader.fields.items()}
    except Exception as exc:  # e.g. a string that is not valid UTF-8
        raise ValueError(f"{path}: corrupt GGUF metadata: {_one_line(exc)}") from exc


def _architecture(metadata: Mapping[str, Any], path: str | os.PathLike) -> str:
    """`general.architecture`, checked to be one we can map onto HF Llama."""
    arch = metadata.get("general.architecture")
    if arch not in SUPPORTED_ARCHITECTURES:
        raise ValueError(f"{path}: unsupported GGUF architecture {arch!r}; "
                         f"supported: {', '.join(SUPPORTED_ARCHITECTURES)}")
    if metadata.get(f"{arch}.expert_count"):
        raise ValueError(f"{path}: mixture-of-experts {arch!r} GGUF files are not supported; only dense models")
    return arch


def _build_config(metadata: Mapping[str, Any], reader: GGUFReader, arch: str) -> dict[str, Any]:
    """An HF config.json dict from the `{arch}.*` and `tokenizer.ggml.*` keys."""
    def get(key: str, default: Any = None) -> Any:
        return metadata.get(f"{arch}.{key}", default)

    hidden = int(get("embedding_length"))
    num_heads = int(get("attention.head_count"))
    head_dim = int(get("attention.key_length") or get("rope.dimension_count") or hidden // num_heads)
    names = {t.name for t in reader.tensors}
    vocab = get("vocab_size") or len(metadata.get(TOKEN_KEY + "tokens") or ())
    hf_arch, model_type = SUPPORTED_ARCHITECTURES[arch]
    config: dict[str, Any] = {
        "architectures": [hf_arch],
        "model_type": model_type,
        "vocab_size": int(vocab),
        "hidden_size": hidden,
        "intermediate_size": int(get("feed_forward_length")),
        "num_hidden_layers": int(get("block_count")),
        "num_attention_heads": num_heads,
        "num_key_value_heads": int(get("attention.head_count_kv", num_heads)),
        "head_dim": head_dim,
        "rms_norm_eps": float(get("attention.layer_norm_rms_epsilon")),
        "rope_theta": float(get("rope.freq_base", DEFAULT_ROPE_THETA)),
        "max_position_embeddings": int(get("context_length", DEFAULT_CONTEXT_LENGTH)),
        "hidden_act": "silu",
        "attention_bias": any(n.endswith(".attn_q.bias") for n in names),
        "tie_word_embeddings": OUTPUT_TENSOR not in names,
        "bos_token_id": metadata.get(TOKEN_KEY + "bos_token_id"),
        "eos_token_id": metadata.get(TOKEN_KEY + "eos_token_id"),
    }
    if get("attention.sliding_window"):
        config["sliding_window"] = int(get("attention.sliding_window"))
    rope_scaling = _rope_scaling(metadata, reader, arch, config)
    if rope_scaling is not None:
        config["rope_scaling"] = rope_scaling
    return config


def _rope_scaling(metadata: Mapping[str, Any], reader: GGUFReader, arch: str,
                  config: Mapping[str, Any]) -> dict[str, Any] | None:
    """HF `rope_scaling` from `{arch}.rope.scaling.*` keys or a llama3-style `rope_freqs` tensor."""
    def get(key: str, default: Any = None) -> Any:
        return metadata.get(f"{arch}.rope.{key}", default)

    freqs = next((t for t in reader.tensors if t.name == ROPE_FREQS_TENSOR), None)
    original = get("scaling.original_context_length")
    if freqs is not None:
        factors = np.asarray(dequantize(freqs.data, freqs.tensor_type), dtype=np.float64).reshape(-1)
        return _llama3_scaling(factors, config["rope_theta"], config["head_dim"],
                               int(original or LLAMA3_ORIGINAL_CONTEXT))
    kind = get("scaling.type") or ("linear" if get("scale_linear") else None)
    if kind in (None, "none"):
        return None
    scaling: dict[str, Any] = {"rope_type": kind, "factor": float(get("scaling.factor") or get("scale_linear"))}
    if original:
        scaling["original_max_position_embeddings"] = int(original)
    if kind == "yarn":
        for gguf_key, hf_key in (("yarn_beta_fast", "beta_fast"), ("yarn_beta_slow", "beta_slow"),
                                 ("attn_factor", "attention_factor")):
            if get(f"scaling.{gguf_key}") is not None:
                scaling[hf_key] = float(get(f"scaling.{gguf_key}"))
    return scaling


def _llama3_scaling(factors: np.ndarray, theta: float, head_dim: int, original: int) -> dict[str, Any]:
    """Recover Llama 3's rope_scaling parameters from the per-frequency divisors llama.cpp stores.

    Divisors are 1 for short wavelengths, `factor` for long ones and 1/((1-s)/factor + s) between,
    where s is linear in original/wavelength: two points of that ramp give low/high_freq_factor.
    """
    freqs = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    factor = float(factors.max())
    if factors.shape != freqs.shape or factor <= 1.0:
        raise ValueError(f"cannot interpret rope_freqs of shape {factors.shape} as llama3 rope scaling")
    smooth = (1.0 / factors - 1.0 / factor) / (1.0 - 1.0 / factor)
    ramp = (smooth > LLAMA3_FIT_RTOL) & (smooth < 1.0 - LLAMA3_FIT_RTOL)
    x = original * freqs / (2 * math.pi)  # original / wavelength
    low, high = 1.0, 4.0  # llama.cpp's defaults, used when the ramp has too few points to fit
    if ramp.sum() >= 2:
        slope, intercept = np.polyfit(x[ramp], smooth[ramp], 1)
        low = round(float(-intercept / slope), LLAMA3_FIT_DECIMALS)
        high = round(float(low + 1.0 / slope), LLAMA3_FIT_DECIMALS)
    scaling = {"rope_type": "llama3", "factor": round(factor, LLAMA3_FIT_DECIMALS), "low_freq_factor": low,
               "high_freq_factor": high, "original_max_position_embeddings": original}
    if not np.allclose(_llama3_factors(freqs, scaling), factors, rtol=LLAMA3_FIT_RTOL):
        raise ValueError("rope_freqs does not match llama3 rope scaling; this GGUF is not supported")
    return scaling


def _llama3_factors(freqs: np.ndarray, scaling: Mapping[str, Any]) -> np.ndarray:
    """The divisors llama.cpp's converter writes for the given llama3 rope_scaling."""
    x = scaling["original_max_position_embeddings"] * freqs / (2 * math.pi)
    low, high, factor = scaling["low_freq_factor"], scaling["high_freq_factor"], scaling["factor"]
    smooth = np.clip((x - low) / (high - low), 0.0, 1.0)
    return 1.0 / ((1.0 - smooth) / factor + smooth)


def _hf_name(gguf_name: str, path: str | os.PathLike) -> str | None:
    """The HF parameter name for a GGUF tensor; None for tensors folded into the config."""
    if gguf_name in SKIPPED_TENSORS:
        return None
    if gguf_name in GLOBAL_TENSOR_NAMES:
        return GLOBAL_TENSOR_NAMES[gguf_name]
    match = LAYER_TENSOR_PATTERN.fullmatch(gguf_name)
    if match and match.group(2) in LAYER_TENSOR_NAMES:
        layer, part, kind = match.groups()
        return f"model.layers.{layer}.{LAYER_TENSOR_NAMES[part]}.{kind}"
    raise ValueError(f"{path}: unexpected tensor {gguf_name!r} for a llama-family GGUF")


def _dequantize(tensor: ReaderTensor, path: str | os.PathLike) -> np.ndarray:
    """Float32 values in torch's (rows, cols) order (the reader already reverses GGUF's shape)."""
    try:
        values = dequantize(tensor.data, tensor.tensor_type)
    except NotImplementedError as exc:
        raise ValueError(f"{path}: tensor {tensor.name!r} has unsupported type {tensor.tensor_type.name}") from exc
    shape = tuple(int(d) for d in reversed(tensor.shape.tolist()))
    return values.reshape(shape)


def _unpermute_rope_rows(weight: np.ndarray, num_heads: int) -> np.ndarray:
    """Undo llama.cpp's Q/K row permutation: per head, rows (2i, 2i+1) go back to (i, i + d/2)."""
    half_head = weight.shape[0] // num_heads // 2
    per_head = weight.reshape(num_heads, half_head, 2, *weight.shape[1:])
    return per_head.swapaxes(1, 2).reshape(weight.shape)


def _token(tokens: list[str], token_id: int | None) -> str | None:
    """The token string for an id, or None if the id is absent or out of range."""
    if token_id is None or not 0 <= token_id < len(tokens):
        return None
    return tokens[token_id]


def _one_line(exc: BaseException) -> str:
    """`Type: message` on one line, for wrapping a library error in our own."""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"
