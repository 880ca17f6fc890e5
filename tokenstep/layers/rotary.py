"""Rotary position embeddings (RoPE), computed exactly as transformers does so logits match."""

from __future__ import annotations

import math

import torch

from tokenstep.config import RopeConfig


def inverse_frequencies(rope: RopeConfig, head_dim: int) -> torch.Tensor:
    """The per-pair rotation frequencies, [head_dim // 2] float32, with llama3 scaling applied."""
    # Built on the CPU even when the model is constructed on the meta device: these are values, not weights.
    steps = torch.arange(0, head_dim, 2, dtype=torch.int64, device="cpu").float()
    inv_freq = 1.0 / (rope.theta ** (steps / head_dim))
    if rope.rope_type == "llama3":
        inv_freq = _llama3_scaled(inv_freq, rope)
    return inv_freq


def _llama3_scaled(inv_freq: torch.Tensor, rope: RopeConfig) -> torch.Tensor:
    # Llama 3.1: long wavelengths are slowed by `factor`, short ones kept, the band between blended.
    old_len = rope.original_max_position_embeddings
    low_freq_wavelen = old_len / rope.low_freq_factor
    high_freq_wavelen = old_len / rope.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / rope.factor, inv_freq)
    smooth = (old_len / wavelen - rope.low_freq_factor) / (rope.high_freq_factor - rope.low_freq_factor)
    blended = (1 - smooth) * scaled / rope.factor + smooth * scaled
    is_medium = ~(wavelen < high_freq_wavelen) & ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium, blended, scaled)


class RotaryEmbedding(torch.nn.Module):
    """Precomputes cos/sin for every position once; forward rotates q and k in place of HF's."""

    def __init__(self, rope: RopeConfig, head_dim: int, max_positions: int) -> None:
        super().__init__()
        inv_freq = inverse_frequencies(rope, head_dim)
        positions = torch.arange(max_positions, dtype=torch.float32, device="cpu")
        freqs = positions[:, None] * inv_freq[None, :]  # [P, D/2]
        angles = torch.cat((freqs, freqs), dim=-1)  # [P, D]
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def tables(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin [T, 1, D] for `positions` [T], looked up once per forward pass for all layers."""
        return self.cos[positions].unsqueeze(1).to(dtype), self.sin[positions].unsqueeze(1).to(dtype)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x [T, N, D] (any number of q and k heads together) by the angles of `tables`."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin
