"""Decoding through the engine on a tiny model: seeds, every finish reason, min_tokens, logprobs, traces."""

from __future__ import annotations

import time

import pytest

from tokenstep import LLM, SamplingParams
from tokenstep.engine.engine import Engine

EOS = 2  # the tiny checkpoints' eos_token_id (tests/checkpoints.py)
FORCE = 100.0  # a logit_bias that makes a token certain


@pytest.fixture(scope="module")
def llm(checkpoint_factory):
    directory, _ = checkpoint_factory("qwen2-qkv-bias")
    return LLM(str(directory), progress=False)


def _tokens(llm, prompt, params):
    return llm.generate(prompt, params)[0].outputs[0].token_ids


def test_seeded_request_is_identical_alone_and_beside_seven_others(llm):
    params = SamplingParams(temperature=1.0, top_p=0.95, seed=123, max_tokens=24, ignore_eos=True)
    alone = _tokens(llm, "Once upon a time", params)
    others = [("Hello", SamplingParams(temperature=0.8, seed=i, max_tokens=30, ignore_eos=True)) for i in range(4)]
    others += [("def add(a, b):", SamplingParams(temperature=0, max_tokens=10, ignore_eos=True)),
               ("The capital", SamplingParams(top_k=5, max_tokens=40, ignore_eos=True)),
               ("x", SamplingParams(temperature=1.5, min_p=0.1, max_tokens=5, ignore_eos=True))]
    prompts = [p for p, _ in others[:3]] + ["Once upon a time"] + [p for p, _ in others[3:]]
    params_list = [p for _, p in others[:3]] + [params] + [p for _, p in others[3:]]
    batch = llm.generate(prompts, params_list)
    assert batch[3].outputs[0].token_ids == alone
    assert _tokens(llm, "Once upon a time", SamplingParams(temperature=1.0, top_p=0.95, seed=124, max_tokens=24,
                                                          ignore_eos=True)) != alone


def test_finish_reason_stop_on_eos(llm):
    output = llm.generate("Hi", SamplingParams(logit_bias={EOS: FORCE}, max_tokens=10))[0].outputs[0]
    assert (output.finish_reason, output.stop_reason, output.token_ids) == ("stop", None, [EOS])
    assert output.text == ""


def test_finish_reason_stop_on_a_stop_token_id(llm):
    output = llm.generate("Hi", SamplingParams(logit_bias={77: FORCE}, stop_token_ids=[77], max_tokens=10))[0].outputs[0]
    assert (output.finish_reason, output.stop_reason, output.token_ids) == ("stop", 77, [77])


def test_finish_reason_stop_on_a_stop_string(llm):
    params = SamplingParams(temperature=0, max_tokens=20, ignore_eos=True)
    free = llm.generate("Hello world", params)[0].outputs[0].text
    stop = free[5:8]
    assert stop and stop not in free[:5]
    cut = llm.generate("Hello world", SamplingParams(temperature=0, max_tokens=20, ignore_eos=True, stop=[stop]))[0]
    assert (cut.outputs[0].finish_reason, cut.outputs[0].stop_reason) == ("stop", stop)
    assert cut.outputs[0].text == free[:free.index(stop)]
    kept = llm.generate("Hello world", SamplingParams(temperature=0, max_tokens=20, ignore_eos=True, stop=[stop],
                                                      include_stop_str_in_output=True))[0]
    assert kept.outputs[0].text == free[:free.index(stop) + len(stop)]


def test_finish_reason_length(llm):
    output = llm.generate("Hi", SamplingParams(max_tokens=3, ignore_eos=True))[0].outputs[0]
    assert (output.finish_reason, len(output.token_ids)) == ("length", 3)


def test_ignore_eos_generates_through_eos(llm):
    output = llm.generate("Hi", SamplingParams(logit_bias={EOS: FORCE}, ignore_eos=True, max_tokens=4))[0].outputs[0]
    assert output.token_ids == [EOS] * 4 and output.finish_reason == "length"


def test_min_tokens_suppresses_eos_until_reached(llm):
    output = llm.generate("Hi", SamplingParams(logit_bias={EOS: FORCE}, min_tokens=5, max_tokens=20))[0].outputs[0]
    assert len(output.token_ids) == 6 and output.token_ids[-1] == EOS and EOS not in output.token_ids[:-1]
    assert output.finish_reason == "stop"


def test_finish_reason_timeout(llm):
    started = time.monotonic()
    output = llm.generate("Hi", SamplingParams(timeout=0.05, max_tokens=None, ignore_eos=True))[0].outputs[0]
    assert output.finish_reason == "timeout"
    assert time.monotonic() - started < 5


def test_finish_reason_abort_frees_blocks(llm):
    engine: Engine = llm.engine
    free = engine.allocator.num_free
    engine.add_request("abort-me", "Hello", SamplingParams(max_tokens=50, ignore_eos=True))
    engine.step()
    engine.abort("abort-me")
    outputs = engine.step()
    assert [o.outputs[0].finish_reason for o in outputs if o.request_id == "abort-me"] == ["abort"]
    assert engine.allocator.num_free == free and not engine.has_unfinished_requests()


def test_logprobs_per_token_are_labelled(llm):
    output = llm.generate("Hi", SamplingParams(logprobs=3, max_tokens=5, seed=1, ignore_eos=True))[0].outputs[0]
    assert output.logprobs_mode == "raw" and len(output.logprobs) == 5
    for token_id, entry in zip(output.token_ids, output.logprobs):
        assert entry.token_id == token_id and len(entry.top) == 3
        assert entry.logprob <= max(entry.top.values()) + 1e-6


def test_trace_has_one_step_per_token_with_texts(llm):
    output = llm.generate("Hi", SamplingParams(trace=4, max_tokens=6, seed=2, ignore_eos=True, top_p=0.9))[0].outputs[0]
    assert len(output.trace) == 6
    for token_id, step in zip(output.token_ids, output.trace):
        assert step.chosen_token_id == token_id
        assert any(c.token_id == token_id and c.final_prob > 0 for c in step.candidates)
        assert all(isinstance(c.text, str) for c in step.candidates)


def test_token_ids_in_params_are_checked_against_the_vocabulary(llm):
    with pytest.raises(ValueError, match="logit_bias: token id 100000 is outside the vocabulary"):
        llm.generate("Hi", SamplingParams(logit_bias={100000: 1.0}))
    with pytest.raises(ValueError, match="stop_token_ids: token id 100000"):
        llm.generate("Hi", SamplingParams(stop_token_ids=[100000]))


def test_generation_config_defaults_are_explicit_and_traceable():
    from tokenstep.params import resolve_sampling_params

    generation_config = {"temperature": 0.6, "top_p": 0.9, "do_sample": True, "max_new_tokens": 50}
    params, sources = resolve_sampling_params({"top_p": 0.5, "seed": 3}, {"max_tokens": 20}, generation_config)
    assert (params.temperature, params.top_p, params.max_tokens, params.seed) == (0.6, 0.5, 20, 3)
    assert sources["temperature"] == "generation_config" and sources["top_p"] == "request"
    assert sources["max_tokens"] == "server" and sources["min_p"] == "default"
    greedy, _ = resolve_sampling_params({}, None, {"do_sample": False, "temperature": 0.7})
    assert greedy.temperature == 0.0
