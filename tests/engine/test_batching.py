"""Continuous batching on a real (tiny) model: batch, preemption and prefix caching never change tokens."""

from __future__ import annotations

import pytest

from tokenstep import LLM, SamplingParams

BLOCK_SIZE = 16
PROMPT_LENGTHS = [1, 3, 5, 8, 13, 16, 17, 21, 30, 31, 32, 33, 40, 47, 55, 64]


def _prompts():
    return [[3 + (7 * i + 11 * n) % 300 for i in range(n)] for n in PROMPT_LENGTHS]


@pytest.fixture(scope="module")
def directory(checkpoint_factory):
    return str(checkpoint_factory("llama-gqa-untied")[0])


@pytest.fixture(scope="module")
def roomy(directory):
    return LLM(directory, progress=False)


def _ids(outputs):
    return [o.outputs[0].token_ids for o in outputs]


def test_sixteen_prompts_together_equal_each_alone(roomy):
    params = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
    together = _ids(roomy.generate(prompt_token_ids=_prompts(), sampling_params=params))
    alone = [_ids(roomy.generate(prompt_token_ids=[p], sampling_params=params))[0] for p in _prompts()]
    assert together == alone


def test_a_tiny_kv_budget_preempts_and_still_gives_the_same_tokens(roomy, directory):
    greedy = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
    seeded = [SamplingParams(temperature=0.9, top_p=0.95, seed=i, max_tokens=16, ignore_eos=True) for i in range(16)]
    expected_greedy = _ids(roomy.generate(prompt_token_ids=_prompts(), sampling_params=greedy))
    expected_seeded = _ids(roomy.generate(prompt_token_ids=_prompts(), sampling_params=seeded))
    per_block = roomy.engine.runner.bytes_per_block
    tight = LLM(directory, kv_cache_memory=14 * per_block, progress=False)  # 13 usable blocks for 16 prompts
    assert _ids(tight.generate(prompt_token_ids=_prompts(), sampling_params=greedy)) == expected_greedy
    assert _ids(tight.generate(prompt_token_ids=_prompts(), sampling_params=seeded)) == expected_seeded
    assert tight.engine.scheduler.stats.num_preemptions > 0
    assert tight.engine.allocator.num_free == tight.engine.allocator.num_blocks


def test_seeded_request_alone_equals_in_a_batch_of_sixteen(roomy):
    params = [SamplingParams(temperature=1.0, seed=100 + i, max_tokens=12, ignore_eos=True) for i in range(16)]
    batch = _ids(roomy.generate(prompt_token_ids=_prompts(), sampling_params=params))
    for i in (0, 7, 15):
        assert _ids(roomy.generate(prompt_token_ids=[_prompts()[i]], sampling_params=params[i]))[0] == batch[i]


def test_prefix_cache_hit_computes_only_new_tokens_and_matches_a_cold_run(directory):
    shared = [3 + (5 * i) % 200 for i in range(3 * BLOCK_SIZE)]  # a 3-block "system prompt"
    first, second = shared + [201, 202, 203], shared + [210, 211, 212, 213, 214]
    params = SamplingParams(temperature=0.8, seed=5, max_tokens=10, ignore_eos=True)
    warm = LLM(directory, progress=False)
    warm.generate(prompt_token_ids=[first], sampling_params=params)
    before = warm.engine.scheduler.stats.num_computed_tokens
    hit = warm.generate(prompt_token_ids=[second], sampling_params=params)[0]
    computed = warm.engine.scheduler.stats.num_computed_tokens - before
    assert hit.num_cached_tokens == 3 * BLOCK_SIZE
    assert computed == len(second) - 3 * BLOCK_SIZE + params.max_tokens - 1  # new prompt tokens + decodes
    cold = LLM(directory, enable_prefix_caching=False, progress=False)
    assert hit.outputs[0].token_ids == cold.generate(prompt_token_ids=[second], sampling_params=params)[0].outputs[0].token_ids
