"""Tiny random-weight checkpoints for tests, built with transformers' own configs and save_pretrained
(no network). Each builder returns the directory; the transformers model is rebuilt from it on demand."""

from __future__ import annotations

import json
from pathlib import Path

import torch

TINY = dict(vocab_size=384, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, max_position_embeddings=256)
LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 32, "rope_theta": 500000.0}

# name -> (transformers config class name, config overrides)
CASES: dict[str, tuple[str, dict]] = {
    "llama-gqa-untied": ("LlamaConfig", dict(num_key_value_heads=2, tie_word_embeddings=False)),
    "llama-mqa-tied": ("LlamaConfig", dict(num_key_value_heads=1, tie_word_embeddings=True)),
    "llama3-rope-bias": ("LlamaConfig", dict(num_key_value_heads=2, rope_parameters=LLAMA3_ROPE,
                                               attention_bias=True, mlp_bias=True)),
    "mistral-window": ("MistralConfig", dict(num_key_value_heads=2, sliding_window=24)),
    "qwen2-qkv-bias": ("Qwen2Config", dict(num_key_value_heads=2, tie_word_embeddings=True)),
    "qwen3-qk-norm": ("Qwen3Config", dict(num_key_value_heads=2, head_dim=32, tie_word_embeddings=False)),
    "gpt2": ("GPT2Config", dict(n_embd=64, n_layer=2, n_head=4, n_positions=256, vocab_size=384)),
}


def build_checkpoint(case: str, directory: Path, seed: int = 0, dtype: torch.dtype = torch.float32):
    """Save a random-weight model of `case` into `directory` and return the transformers model."""
    import transformers

    config_class, overrides = CASES[case]
    kwargs = dict(TINY, **overrides) if config_class != "GPT2Config" else dict(overrides)
    kwargs.setdefault("bos_token_id", 1)
    kwargs.setdefault("eos_token_id", 2)
    config = getattr(transformers, config_class)(**kwargs)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
    _scale_up_weights(model)
    model.eval()
    model.save_pretrained(directory)
    return model


def _scale_up_weights(model: torch.nn.Module) -> None:
    # HF's init (std 0.02) makes near-uniform logits where argmax ties hide bugs; widen the weights so
    # greedy choices are decisive, and randomise norms and biases so a missing one changes the output.
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.ndim >= 2:
                param.normal_(0.0, 0.15)
            else:
                param.uniform_(0.5, 1.5) if "norm" in name or "ln" in name else param.normal_(0.0, 0.1)


def write_tokenizer(directory: Path, vocab_size: int = TINY["vocab_size"]) -> None:
    """A byte-level BPE tokenizer trained on a few sentences, with a ChatML-style template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    special = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - 16, special_tokens=special,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    corpus = ["The capital of France is Paris.", "Once upon a time there was a tiny model.",
              "def add(a, b):\n    return a + b", "Hello world! How are you today?"] * 20
    tokenizer.train_from_iterator(corpus, trainer)
    tokenizer.save(str(directory / "tokenizer.json"))
    template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    (directory / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": "<s>", "eos_token": "</s>", "chat_template": template}))
