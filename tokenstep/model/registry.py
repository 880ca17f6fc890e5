"""config.json "architectures" -> the class that implements it."""

from __future__ import annotations

from torch import nn

from tokenstep.model.gpt2 import GPT2LMHeadModel
from tokenstep.model.llama import LlamaForCausalLM

# Mistral, Qwen2 and Qwen3 are the Llama decoder with config flags (sliding window, qkv bias, q/k norm).
MODEL_CLASSES: dict[str, type[nn.Module]] = {
    "LlamaForCausalLM": LlamaForCausalLM,
    "MistralForCausalLM": LlamaForCausalLM,
    "Qwen2ForCausalLM": LlamaForCausalLM,
    "Qwen3ForCausalLM": LlamaForCausalLM,
    "GPT2LMHeadModel": GPT2LMHeadModel,
}


def model_class(hf_config: dict) -> type[nn.Module]:
    """The implementing class, or a one-line ValueError naming the architecture and the supported ones."""
    architectures = hf_config.get("architectures") or []
    if not architectures:
        raise ValueError(f"config.json names no architecture; supported: {', '.join(MODEL_CLASSES)}")
    name = architectures[0]
    if name not in MODEL_CLASSES:
        raise ValueError(f"unsupported architecture {name!r}; supported: {', '.join(MODEL_CLASSES)}")
    return MODEL_CLASSES[name]
