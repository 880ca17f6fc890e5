"""GPT-2: learned positions, LayerNorm, fused qkv, gelu_new. Checkpoints store Conv1D weights as
[in, out]; they are transposed once at load so every projection is a plain nn.Linear.
"""

from __future__ import annotations

import torch
from torch import nn

from tokenstep.config import ModelConfig
from tokenstep.layers.activation import get_activation
from tokenstep.layers.attention import KVCache, paged_attention
from tokenstep.runner.forward_batch import ForwardBatch

CONV1D_WEIGHTS = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


class GPT2Attention(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.num_heads, self.head_dim = config.num_heads, config.head_dim
        self.scale = config.head_dim ** -0.5
        self.c_attn = nn.Linear(config.hidden_size, 3 * config.hidden_size)
        self.c_proj = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, x: torch.Tensor, cache: KVCache, batch: ForwardBatch) -> torch.Tensor:
        num_tokens = x.shape[0]
        q, k, v = self.c_attn(x).view(num_tokens, 3, self.num_heads, self.head_dim).unbind(1)  # 3 x [T, H, D]
        return self.c_proj(paged_attention(q, k, v, cache, batch, self.scale))


class GPT2MLP(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(config.hidden_size, config.intermediate_size)
        self.c_proj = nn.Linear(config.intermediate_size, config.hidden_size)
        self.act = get_activation(config.hidden_act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(self.act(self.c_fc(x)))


class GPT2Block(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.hidden_size, eps=config.norm_eps)
        self.attn = GPT2Attention(config)
        self.ln_2 = nn.LayerNorm(config.hidden_size, eps=config.norm_eps)
        self.mlp = GPT2MLP(config)

    def forward(self, x: torch.Tensor, cache: KVCache, batch: ForwardBatch) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), cache, batch)
        return x + self.mlp(self.ln_2(x))


class GPT2Model(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.wte = nn.Embedding(config.vocab_size, config.hidden_size)
        self.wpe = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.h = nn.ModuleList(GPT2Block(config) for _ in range(config.num_layers))
        self.ln_f = nn.LayerNorm(config.hidden_size, eps=config.norm_eps)

    def forward(self, batch: ForwardBatch, caches: list[KVCache]) -> torch.Tensor:
        x = self.wte(batch.input_ids) + self.wpe(batch.positions)  # [T, hidden]
        for block, cache in zip(self.h, caches):
            x = block(x, cache, batch)
        return self.ln_f(x)


class GPT2LMHeadModel(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.transformer = GPT2Model(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.transformer.wte.weight

    def forward(self, batch: ForwardBatch, caches: list[KVCache]) -> torch.Tensor:
        return self.transformer(batch, caches)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden)

    @staticmethod
    def remap_weight(name: str, tensor: torch.Tensor) -> tuple[str, torch.Tensor] | None:
        if name.endswith((".attn.bias", ".attn.masked_bias")):
            return None  # causal-mask buffers of old checkpoints, not weights
        if not name.startswith(("transformer.", "lm_head.")):
            name = "transformer." + name  # the original OpenAI checkpoints have no prefix
        if name.endswith(CONV1D_WEIGHTS):
            tensor = tensor.t()
        return name, tensor
