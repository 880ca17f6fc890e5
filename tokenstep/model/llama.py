"""The Llama family: Llama (incl. SmolLM2, rope_scaling llama3), Mistral, Qwen2 (qkv bias), Qwen3
(q/k RMSNorm). One decoder, switched by ModelConfig flags; module names are transformers' so a
checkpoint loads by name.
"""

from __future__ import annotations

import torch
from torch import nn

from tokenstep.config import ModelConfig
from tokenstep.layers.activation import get_activation
from tokenstep.layers.attention import KVCache, paged_attention
from tokenstep.layers.linear import merge_linears
from tokenstep.layers.norm import RMSNorm
from tokenstep.layers.rotary import RotaryEmbedding, apply_rotary

Rope = tuple[torch.Tensor, torch.Tensor]  # (cos, sin), each [T, 1, D]
from tokenstep.runner.forward_batch import ForwardBatch


class LlamaAttention(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads = config.num_heads, config.num_kv_heads
        self.head_dim = config.head_dim
        self.scale = config.head_dim ** -0.5
        hidden, qkv_bias = config.hidden_size, config.attention_bias
        self.q_proj = nn.Linear(hidden, self.num_heads * self.head_dim, bias=qkv_bias)
        self.k_proj = nn.Linear(hidden, self.num_kv_heads * self.head_dim, bias=qkv_bias)
        self.v_proj = nn.Linear(hidden, self.num_kv_heads * self.head_dim, bias=qkv_bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, hidden, bias=config.attention_out_bias)
        if config.qk_norm:
            self.q_norm = RMSNorm(self.head_dim, config.norm_eps)
            self.k_norm = RMSNorm(self.head_dim, config.norm_eps)
        self.qk_norm = config.qk_norm

    def fuse_projections(self) -> None:
        """After loading: q/k/v become one matmul (checkpoints store them apart, under HF names)."""
        self.qkv_proj = merge_linears(self.q_proj, self.k_proj, self.v_proj)
        del self.q_proj, self.k_proj, self.v_proj

    def forward(self, x: torch.Tensor, rope: Rope, cache: KVCache, batch: ForwardBatch) -> torch.Tensor:
        num_tokens, heads = x.shape[0], self.num_heads
        qk_size = (self.num_heads + self.num_kv_heads) * self.head_dim
        qk, v = self.qkv_proj(x).split([qk_size, self.num_kv_heads * self.head_dim], dim=-1)
        qk = qk.view(num_tokens, self.num_heads + self.num_kv_heads, self.head_dim)  # [T, H + KvH, D]
        v = v.view(num_tokens, self.num_kv_heads, self.head_dim)  # [T, KvH, D]
        if self.qk_norm:
            qk = torch.cat((self.q_norm(qk[:, :heads]), self.k_norm(qk[:, heads:])), dim=1)
        qk = apply_rotary(qk, *rope)  # q and k heads rotated together: one set of ops per layer
        q, k = qk[:, :heads], qk[:, heads:]
        return self.o_proj(paged_attention(q, k, v, cache, batch, self.scale))


class LlamaMLP(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        hidden, inner, bias = config.hidden_size, config.intermediate_size, config.mlp_bias
        self.gate_proj = nn.Linear(hidden, inner, bias=bias)
        self.up_proj = nn.Linear(hidden, inner, bias=bias)
        self.down_proj = nn.Linear(inner, hidden, bias=bias)
        self.act = get_activation(config.hidden_act)

    def fuse_projections(self) -> None:
        """After loading: gate and up become one matmul."""
        self.gate_up_proj = merge_linears(self.gate_proj, self.up_proj)
        del self.gate_proj, self.up_proj

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(self.act(gate) * up)


class LlamaDecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.self_attn = LlamaAttention(config)
        self.mlp = LlamaMLP(config)
        self.input_layernorm = RMSNorm(config.hidden_size, config.norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.norm_eps)

    def forward(self, x: torch.Tensor, rope: Rope, cache: KVCache, batch: ForwardBatch) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), rope, cache, batch)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(LlamaDecoderLayer(config) for _ in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.norm_eps)
        self.rotary = RotaryEmbedding(config.rope, config.head_dim, config.max_position_embeddings)

    def forward(self, batch: ForwardBatch, caches: list[KVCache]) -> torch.Tensor:
        x = self.embed_tokens(batch.input_ids)  # [T, hidden]
        rope = self.rotary.tables(batch.positions, x.dtype)
        for layer, cache in zip(self.layers, caches):
            x = layer(x, rope, cache, batch)
        return self.norm(x)


class LlamaForCausalLM(nn.Module):
    """Decoder stack + LM head. `forward` returns hidden states; `compute_logits` the vocabulary scores."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.model = LlamaModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(self, batch: ForwardBatch, caches: list[KVCache]) -> torch.Tensor:
        return self.model(batch, caches)  # [T, hidden]

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden)  # [N, vocab]

    def fuse_projections(self) -> None:
        """Called once by the loader after every weight is in place."""
        for layer in self.model.layers:
            layer.self_attn.fuse_projections()
            layer.mlp.fuse_projections()

    @staticmethod
    def remap_weight(name: str, tensor: torch.Tensor) -> tuple[str, torch.Tensor] | None:
        """Checkpoint name/tensor -> ours; None drops it (precomputed rotary tables some files carry)."""
        if "rotary_emb" in name:
            return None
        return name, tensor
