"""The offline API on a tiny model: generate, stream, chat, and input errors."""

from __future__ import annotations

import pytest

from tokenstep import LLM, SamplingParams


@pytest.fixture(scope="module")
def llm(checkpoint_factory):
    directory, _ = checkpoint_factory("llama-gqa-untied")
    return LLM(str(directory), progress=False)


def test_streamed_deltas_concatenate_to_the_generated_text(llm):
    params = SamplingParams(temperature=0.9, max_tokens=24, seed=7, ignore_eos=True)
    full = llm.generate("The capital of France is", params)[0].outputs[0]
    deltas = list(llm.stream("The capital of France is", params))
    assert "".join(d.outputs[0].text for d in deltas) == full.text
    assert [t for d in deltas for t in d.outputs[0].token_ids] == full.token_ids
    assert deltas[-1].finished and deltas[-1].outputs[0].finish_reason == "length"
    assert not any(d.finished for d in deltas[:-1])


def test_results_come_back_in_input_order(llm):
    params = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
    prompts = ["a", "Once upon a time there was a tiny model.", "Hello"]
    outputs = llm.generate(prompts, params)
    assert [o.prompt for o in outputs] == prompts
    assert [o.request_id for o in outputs] == sorted((o.request_id for o in outputs), key=int)


def test_n_choices_are_distinct_streams(llm):
    outputs = llm.generate("Hello", SamplingParams(n=3, temperature=1.0, max_tokens=16, seed=1, ignore_eos=True))
    choices = outputs[0].outputs
    assert [c.index for c in choices] == [0, 1, 2]
    assert len({tuple(c.token_ids) for c in choices}) == 3


def test_chat_uses_the_template(llm):
    output = llm.chat([{"role": "user", "content": "Hi"}], SamplingParams(max_tokens=3, temperature=0))[0]
    assert output.prompt == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    assert len(output.outputs[0].token_ids) <= 3


def test_breaking_out_of_a_stream_frees_its_blocks(llm):
    free_before = llm.engine.allocator.num_free
    for _ in llm.stream("Hello", SamplingParams(max_tokens=50, ignore_eos=True)):
        break
    assert llm.engine.allocator.num_free == free_before
    assert not llm.engine.has_unfinished_requests()


def test_bad_inputs_are_clear_errors_and_the_engine_still_works(llm):
    with pytest.raises(ValueError, match="outside the vocabulary"):
        llm.generate(prompt_token_ids=[[1, 2, 10**6]])
    with pytest.raises(ValueError, match="prompt is empty"):
        llm.generate(prompt_token_ids=[[]])
    with pytest.raises(ValueError, match=r"exceeds the context window \(256\)"):
        llm.generate(prompt_token_ids=[[5] * 250], sampling_params=SamplingParams(max_tokens=10))
    with pytest.raises(ValueError, match="context window is 256"):
        llm.generate(prompt_token_ids=[[5] * 300])
    assert not llm.engine.has_unfinished_requests()
    assert llm.generate("ok", SamplingParams(max_tokens=2, temperature=0))[0].finished
