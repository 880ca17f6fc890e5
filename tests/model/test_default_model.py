"""The bundled default model (SmolLM2-135M-Instruct, Q4_1 GGUF), end to end."""

from __future__ import annotations

import pytest
import torch

from tokenstep import SamplingParams

NUM_TOKENS = 32
PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time, in a small village,"]


def test_chat_answers_the_capital_of_france(default_llm):
    output = default_llm.chat([{"role": "user", "content": "What is the capital of France?"}],
                              SamplingParams(temperature=0, max_tokens=32))[0]
    assert "Paris" in output.outputs[0].text


@pytest.fixture(scope="module")
def transformers_gguf_model(default_model_path):
    transformers = pytest.importorskip("transformers")
    model = transformers.AutoModelForCausalLM.from_pretrained(
        default_model_path.parent, gguf_file=default_model_path.name, dtype=torch.float32)
    return model.eval()


def test_greedy_tokens_equal_transformers_on_the_same_gguf(default_llm, transformers_gguf_model):
    token_ids = [default_llm.tokenizer.encode(p) for p in PROMPTS]
    params = SamplingParams(temperature=0, max_tokens=NUM_TOKENS, ignore_eos=True)
    outputs = default_llm.generate(prompt_token_ids=token_ids, sampling_params=params)
    for prompt_ids, output in zip(token_ids, outputs):
        reference = transformers_gguf_model.generate(
            torch.tensor([prompt_ids]), do_sample=False, max_new_tokens=NUM_TOKENS, min_new_tokens=NUM_TOKENS,
            eos_token_id=None, pad_token_id=0)
        assert output.outputs[0].token_ids == reference[0, len(prompt_ids):].tolist()


def test_streaming_the_default_model_gives_the_same_text(default_llm):
    params = SamplingParams(temperature=0, max_tokens=20)
    full = default_llm.generate(PROMPTS[0], params)[0].outputs[0].text
    assert "".join(o.outputs[0].text for o in default_llm.stream(PROMPTS[0], params)) == full
    assert full.strip()
