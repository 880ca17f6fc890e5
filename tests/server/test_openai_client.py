"""The official `openai` client against a real server: completion and chat, streamed and not, n,
stop strings, logprobs, seeds, usage, and our extensions (explain, trace, logprobs_mode)."""

from __future__ import annotations

import statistics
import time

import httpx
import openai
import pytest

from tests.server.harness import metric, start_server, stop_server
from tokenstep.text.tokenizer import Tokenizer

PROMPT = "Once upon a time"
MESSAGES = [{"role": "user", "content": "Hello world! How are you today?"}]


@pytest.fixture(scope="module")
def server(tiny_model, tmp_path_factory):
    server = start_server(tiny_model, tmp_path_factory.mktemp("log") / "server.log", "--default", "top_k=40")
    yield server
    stop_server(server)


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=server.api_key, max_retries=0, timeout=60)


def _streamed_completion(client, model, **kwargs) -> tuple[dict[int, str], dict[int, str], list]:
    texts, finish, chunks = {}, {}, []
    for chunk in client.completions.create(model=model, stream=True, **kwargs):
        chunks.append(chunk)
        for choice in chunk.choices:
            texts[choice.index] = texts.get(choice.index, "") + choice.text
            if choice.finish_reason:
                finish[choice.index] = choice.finish_reason
    return texts, finish, chunks


def _streamed_chat(client, model, **kwargs) -> tuple[str, str | None, list]:
    text, finish, chunks = "", None, []
    for chunk in client.chat.completions.create(model=model, stream=True, **kwargs):
        chunks.append(chunk)
        for choice in chunk.choices:
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
    return text, finish, chunks


def test_models_lists_the_served_model(client, server):
    assert [m.id for m in client.models.list().data] == [server.model]
    assert client.models.retrieve(server.model).id == server.model


def test_completion_returns_text_usage_and_finish_reason(client, server):
    result = client.completions.create(model=server.model, prompt=PROMPT, max_tokens=8, temperature=0,
                                       extra_body={"ignore_eos": True})
    choice = result.choices[0]
    assert result.object == "text_completion" and result.id.startswith("cmpl-")
    assert choice.finish_reason == "length" and choice.text
    assert result.usage.completion_tokens == 8
    assert result.usage.total_tokens == result.usage.prompt_tokens + 8


def test_streamed_completion_equals_the_non_streamed_one(client, server):
    kwargs = dict(prompt=PROMPT, max_tokens=24, temperature=0.9, seed=11, extra_body={"ignore_eos": True})
    whole = client.completions.create(model=server.model, **kwargs).choices[0]
    texts, finish, _ = _streamed_completion(client, server.model, **kwargs)
    assert texts[0] == whole.text and finish[0] == whole.finish_reason == "length"


def test_streamed_chat_equals_the_non_streamed_one(client, server):
    kwargs = dict(messages=MESSAGES, max_tokens=20, temperature=0.9, seed=5)
    whole = client.chat.completions.create(model=server.model, **kwargs)
    text, finish, chunks = _streamed_chat(client, server.model, **kwargs)
    assert whole.object == "chat.completion" and whole.choices[0].message.role == "assistant"
    assert text == whole.choices[0].message.content and finish == whole.choices[0].finish_reason
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(c.object == "chat.completion.chunk" for c in chunks)


def test_n3_gives_three_different_choices(client, server):
    result = client.chat.completions.create(model=server.model, messages=MESSAGES, n=3, max_tokens=12,
                                            temperature=1.0, seed=3, extra_body={"ignore_eos": True})
    assert sorted(c.index for c in result.choices) == [0, 1, 2]
    assert len({c.message.content for c in result.choices}) == 3
    assert result.usage.completion_tokens == 36
    texts, finish, _ = _streamed_completion(client, server.model, prompt=PROMPT, n=3, max_tokens=6, seed=3,
                                            extra_body={"ignore_eos": True})
    assert sorted(texts) == [0, 1, 2] and set(finish.values()) == {"length"}


def test_seed_reproduces_and_other_seeds_differ(client, server):
    def run(seed):
        return client.completions.create(model=server.model, prompt=PROMPT, max_tokens=16, temperature=1.0,
                                         seed=seed, extra_body={"ignore_eos": True}).choices[0].text
    assert run(42) == run(42)
    assert len({run(42), run(43), run(44)}) > 1


def test_stop_string_ends_the_text_streamed_or_not(client, server):
    base = dict(prompt=PROMPT, max_tokens=30, temperature=0, extra_body={"ignore_eos": True})
    full = client.completions.create(model=server.model, **base).choices[0].text
    stop = full[len(full) // 2: len(full) // 2 + 2]
    assert stop.strip(), f"need a visible stop string in {full!r}"
    expected = full[: full.index(stop)]
    result = client.completions.create(model=server.model, stop=[stop], **base).choices[0]
    assert result.text == expected and result.finish_reason == "stop"
    assert result.model_extra["stop_reason"] == stop
    texts, finish, _ = _streamed_completion(client, server.model, stop=[stop], **base)
    assert texts[0] == expected and finish[0] == "stop"


def test_completion_logprobs(client, server):
    result = client.completions.create(model=server.model, prompt=PROMPT, max_tokens=5, logprobs=3, temperature=0,
                                       extra_body={"ignore_eos": True})
    logprobs = result.choices[0].logprobs
    assert len(logprobs.tokens) == len(logprobs.token_logprobs) == len(logprobs.top_logprobs) == 5
    assert all(lp <= 0 for lp in logprobs.token_logprobs)
    assert all(1 <= len(top) <= 3 for top in logprobs.top_logprobs)
    assert logprobs.text_offset == sorted(logprobs.text_offset)
    assert result.choices[0].model_extra["logprobs_mode"] == "raw"


def test_chat_logprobs_streamed_and_not(client, server):
    kwargs = dict(messages=MESSAGES, max_tokens=6, logprobs=True, top_logprobs=2, temperature=0,
                  extra_body={"ignore_eos": True, "logprobs_mode": "processed"})
    choice = client.chat.completions.create(model=server.model, **kwargs).choices[0]
    content = choice.logprobs.content
    assert len(content) == 6 and all(len(e.top_logprobs) == 2 and e.logprob <= 0 for e in content)
    assert choice.model_extra["logprobs_mode"] == "processed"
    _, _, chunks = _streamed_chat(client, server.model, **kwargs)
    streamed = [e for c in chunks for ch in c.choices if ch.logprobs for e in ch.logprobs.content]
    assert [e.logprob for e in streamed] == pytest.approx([e.logprob for e in content])


def test_include_usage_adds_a_last_chunk_with_usage(client, server):
    _, _, chunks = _streamed_completion(client, server.model, prompt=PROMPT, max_tokens=7,
                                        stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 7
    assert all(c.usage is None for c in chunks[:-1])
    _, _, chat_chunks = _streamed_chat(client, server.model, messages=MESSAGES, max_tokens=3,
                                       stream_options={"include_usage": True})
    assert chat_chunks[-1].choices == [] and chat_chunks[-1].usage.total_tokens > 0


def test_explain_reports_values_and_sources(client, server):
    result = client.chat.completions.create(model=server.model, messages=MESSAGES, temperature=0.5,
                                            extra_body={"explain": True})
    explain = result.model_extra["explain"]
    sampling = explain["sampling"]
    assert sampling["temperature"] == {"value": 0.5, "source": "request"}
    assert sampling["top_k"] == {"value": 40, "source": "server"}
    assert sampling["top_p"] == {"value": 1.0, "source": "default"}
    prompt_tokens = result.usage.prompt_tokens
    room = explain["context_window"] - prompt_tokens  # the tiny model's window is smaller than 512
    assert sampling["max_tokens"]["value"] == room and sampling["max_tokens"]["source"] == "server"
    assert "capped" in sampling["max_tokens"]["note"]
    assert explain["prompts"] == [{"prompt_tokens": prompt_tokens, "max_tokens": room}]


def test_echo_trace_and_several_prompts(client, server):
    result = client.completions.create(model=server.model, prompt=["Hello", "The capital"], n=2, max_tokens=3,
                                       echo=True, extra_body={"trace": 3, "ignore_eos": True})
    assert sorted(c.index for c in result.choices) == [0, 1, 2, 3]
    by_index = {c.index: c for c in result.choices}
    assert by_index[0].text.startswith("Hello") and by_index[3].text.startswith("The capital")
    trace = by_index[0].model_extra["trace"]
    assert len(trace) == 3 and {"chosen_token_id", "candidates", "nucleus_size"} <= set(trace[0])


def test_token_id_prompt(client, server):
    result = client.completions.create(model=server.model, prompt=[5, 6, 7], max_tokens=2,
                                       extra_body={"ignore_eos": True})
    assert result.usage.prompt_tokens == 3 and result.usage.completion_tokens == 2


def test_template_syntax_in_a_message_is_text_not_code(client, server, tiny_model):
    # A message is data: the template prints it literally, it never evaluates it.
    injection = "{{ cycler.__init__.__globals__.os.popen('id').read() }}"
    messages = [{"role": "user", "content": injection}]
    tokenizer = Tokenizer.from_hf_dir(tiny_model)
    literal = tokenizer.encode(tokenizer.apply_chat_template(messages), add_special_tokens=False)
    result = client.chat.completions.create(model=server.model, messages=messages, max_tokens=1)
    assert result.usage.prompt_tokens == len(literal)


def test_metrics_count_requests_and_tokens(client, server):
    client.completions.create(model=server.model, prompt=PROMPT, max_tokens=4, extra_body={"ignore_eos": True})
    text = httpx.get(f"{server.url}/metrics", headers=server.headers).text
    assert metric(text, "tokenstep_generation_tokens_total") >= 4
    assert metric(text, "tokenstep_prompt_tokens_total") > 0
    assert 'tokenstep_request_success_total{finish_reason="length"}' in text
    assert metric(text, "tokenstep_time_to_first_token_seconds_count") >= 1
    assert metric(text, "tokenstep_requests_running") == 0
    for name in ("tokenstep_kv_cache_usage_ratio", "tokenstep_e2e_request_latency_seconds_count",
                 "tokenstep_time_per_output_token_seconds_count", "tokenstep_prefix_cache_hit_tokens_total"):
        metric(text, name)


def test_wrong_key_is_refused_by_the_client_too(server):
    bad = openai.OpenAI(base_url=f"{server.url}/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()


def test_keep_alive_responses_are_not_held_back_by_nagle(server):
    # Without TCP_NODELAY a response's second write waits for the client's delayed ACK (~40 ms).
    with httpx.Client(base_url=server.url) as http:
        http.get("/health")
        timings = []
        for _ in range(5):
            started = time.perf_counter()
            http.get("/health")
            timings.append(time.perf_counter() - started)
    assert statistics.median(timings) < 0.03


def test_logit_bias_steers_and_a_deadline_ends_with_timeout(client, server, tiny_model):
    token = Tokenizer.from_hf_dir(tiny_model).decode([42], skip_special_tokens=False)
    biased = client.completions.create(model=server.model, prompt=PROMPT, max_tokens=4, temperature=0,
                                       logit_bias={"42": 100}, logprobs=0, extra_body={"ignore_eos": True})
    assert biased.choices[0].logprobs.tokens == [token] * 4
    timed = client.completions.create(model=server.model, prompt=PROMPT, max_tokens=230,
                                      extra_body={"ignore_eos": True, "timeout": 0.001})
    assert timed.choices[0].finish_reason == "timeout" and timed.usage.completion_tokens < 230


def test_a_repeated_prompt_is_served_from_the_prefix_cache(client, server):
    prompt = list(range(10, 60))  # 50 tokens: three full KV blocks of 16
    kwargs = dict(model=server.model, prompt=prompt, max_tokens=4, temperature=0, extra_body={"ignore_eos": True})
    cold = client.completions.create(**kwargs)
    warm = client.completions.create(**kwargs)
    assert warm.usage.prompt_tokens_details.cached_tokens >= 32
    assert warm.choices[0].text == cold.choices[0].text  # a cache hit changes nothing
    text = httpx.get(f"{server.url}/metrics", headers=server.headers).text
    assert metric(text, "tokenstep_prefix_cache_hit_tokens_total") >= 32
