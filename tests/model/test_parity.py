"""Every architecture against transformers on tiny random checkpoints: float32 logits at prefill and
at each decode step within 1e-4, and greedy tokens identical to model.generate(do_sample=False)."""

from __future__ import annotations

import pytest
import torch

from tests.checkpoints import CASES
from tokenstep import LLM, SamplingParams
from tokenstep.model.loader import load_model
from tokenstep.runner.model_runner import ModelRunner, SequenceChunk

ATOL = 1e-4
NUM_DECODE_STEPS = 20
NUM_GREEDY_TOKENS = 32
BLOCK_SIZE = 16


def _hf_greedy(model, prompt: list[int], num_tokens: int) -> list[int]:
    # eos_token_id=None: generate exactly num_tokens, the way ignore_eos does (min_new_tokens alone
    # would mask EOS out of the logits and change the greedy choice).
    out = model.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=num_tokens,
                         min_new_tokens=num_tokens, eos_token_id=None, pad_token_id=0)
    return out[0, len(prompt):].tolist()


@pytest.mark.parametrize("case", list(CASES))
def test_logits_match_transformers_at_prefill_and_every_decode_step(case, checkpoint_factory):
    directory, hf_model = checkpoint_factory(case)
    loaded = load_model(directory, torch.float32, torch.device("cpu"), progress=False)
    runner = ModelRunner(loaded, num_blocks=8, block_size=BLOCK_SIZE, device=torch.device("cpu"), dtype=torch.float32)
    generator = torch.Generator().manual_seed(1)
    prompt_len = 27  # spans two blocks, and Mistral's 24-token window
    token_ids = torch.randint(3, hf_model.config.vocab_size, (prompt_len + NUM_DECODE_STEPS,), generator=generator)
    with torch.no_grad():
        reference = hf_model(token_ids[None]).logits[0]  # [S, V]
    blocks = list(range(1, 5))  # block 0 is the null block
    prefill = runner.forward([SequenceChunk(token_ids[:prompt_len].tolist(), 0, blocks)], all_logits=True)
    torch.testing.assert_close(prefill, reference[:prompt_len], atol=ATOL, rtol=0)
    for position in range(prompt_len, prompt_len + NUM_DECODE_STEPS):
        logits = runner.forward([SequenceChunk([int(token_ids[position])], position, blocks)])
        torch.testing.assert_close(logits[0], reference[position], atol=ATOL, rtol=0)


@pytest.mark.parametrize("case", list(CASES))
def test_greedy_tokens_equal_transformers_generate_for_a_batch_of_prompts(case, checkpoint_factory):
    directory, hf_model = checkpoint_factory(case)
    llm = LLM(str(directory), progress=False)
    prompts = [[5, 17, 42], list(range(10, 41)), [100, 7, 250, 31, 9, 8, 77, 120, 64, 3, 33]]
    params = SamplingParams(temperature=0, max_tokens=NUM_GREEDY_TOKENS, ignore_eos=True)
    outputs = llm.generate(prompt_token_ids=prompts, sampling_params=params)
    for prompt, output in zip(prompts, outputs):
        assert output.outputs[0].token_ids == _hf_greedy(hf_model, prompt, NUM_GREEDY_TOKENS)
        assert output.outputs[0].finish_reason == "length"


def test_batched_decode_equals_each_prompt_alone(checkpoint_factory):
    directory, _ = checkpoint_factory("llama-gqa-untied")
    llm = LLM(str(directory), progress=False)
    prompts = [list(range(3, 3 + n)) for n in (1, 5, 16, 17, 40, 2)]
    params = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    together = [o.outputs[0].token_ids for o in llm.generate(prompt_token_ids=prompts, sampling_params=params)]
    alone = [llm.generate(prompt_token_ids=[p], sampling_params=params)[0].outputs[0].token_ids for p in prompts]
    assert together == alone


def test_bfloat16_runs_and_mostly_agrees_with_float32(checkpoint_factory):
    directory, _ = checkpoint_factory("llama-gqa-untied")
    prompt = [[4, 8, 15, 16, 23, 42]]
    params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    fp32 = LLM(str(directory), progress=False).generate(prompt_token_ids=prompt, sampling_params=params)
    bf16 = LLM(str(directory), dtype="bfloat16", progress=False).generate(prompt_token_ids=prompt, sampling_params=params)
    assert len(bf16[0].outputs[0].token_ids) == 8
    assert bf16[0].outputs[0].token_ids[0] == fp32[0].outputs[0].token_ids[0]
