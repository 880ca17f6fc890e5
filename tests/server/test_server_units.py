"""The server's pure parts, without a process: parameter precedence and explain, names, settings,
error shapes, and the app's health/auth behaviour over a stub engine."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import httpx
import pytest
from pydantic import ValidationError

from tokenstep.engine.async_engine import EngineDeadError, EngineStats, QueueFullError
from tokenstep.outputs import CompletionOutput, RequestOutput
from tokenstep.server.app import create_app
from tokenstep.server.errors import APIError, from_validation_error
from tokenstep.server.http import merge, sse_event
from tokenstep.server.protocol import REQUEST_FIELDS, ChatCompletionRequest, CompletionRequest
from tokenstep.server.request_params import build_params, chat_sampling, completion_sampling
from tokenstep.server.settings import ServerSettings, model_name_from_path, parse_sampling_defaults

SETTINGS = ServerSettings(model_name="m", sampling_defaults={"top_p": 0.9}, chat_max_tokens=100)
GENERATION_CONFIG = {"temperature": 0.6, "top_p": 0.95, "max_new_tokens": 64}
WINDOW = 1000


def _completion(**fields) -> CompletionRequest:
    return CompletionRequest.model_validate({"model": "m", "prompt": "x", **fields})


def _chat(**fields) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate({"model": "m", "messages": [{"role": "user", "content": "x"}], **fields})


def test_precedence_is_request_then_server_then_generation_config_then_default():
    params, explain = build_params(completion_sampling(_completion(seed=3)), SETTINGS, GENERATION_CONFIG, 10,
                                   WINDOW, "prompt")
    assert (params.seed, explain["seed"]["source"]) == (3, "request")
    assert (params.top_p, explain["top_p"]["source"]) == (0.9, "server")
    assert (params.temperature, explain["temperature"]["source"]) == (0.6, "generation_config")
    assert (params.max_tokens, explain["max_tokens"]["source"]) == (64, "generation_config")
    assert (params.min_p, explain["min_p"]["source"]) == (0.0, "default")


def test_chat_max_tokens_default_is_the_server_flag_capped_to_the_window():
    params, explain = build_params(chat_sampling(_chat(), SETTINGS), SETTINGS, {}, 10, WINDOW, "messages")
    assert (params.max_tokens, explain["max_tokens"]["source"]) == (100, "server")
    params, explain = build_params(chat_sampling(_chat(), SETTINGS), SETTINGS, {}, WINDOW - 30, WINDOW, "messages")
    assert params.max_tokens == 30 and "capped" in explain["max_tokens"]["note"]


def test_a_requested_max_tokens_that_does_not_fit_is_an_error_naming_both_numbers():
    with pytest.raises(APIError) as caught:
        build_params(chat_sampling(_chat(max_completion_tokens=50), SETTINGS), SETTINGS, {}, 980, WINDOW, "messages")
    assert caught.value.param == "max_completion_tokens"
    assert "980" in caught.value.message and "50" in caught.value.message


def test_chat_logprobs_fields_map_to_sampling_params():
    sampling = chat_sampling(_chat(logprobs=True, top_logprobs=4), SETTINGS)
    assert sampling.values["logprobs"] == 4
    assert chat_sampling(_chat(logprobs=True), SETTINGS).values["logprobs"] == 0
    assert chat_sampling(_chat(), SETTINGS).values["logprobs"] is None


def test_range_errors_name_the_request_field():
    with pytest.raises(APIError) as caught:
        build_params(completion_sampling(_completion(temperature=-2)), SETTINGS, {}, 1, WINDOW, "prompt")
    assert caught.value.status == 400 and caught.value.param == "temperature"


def test_validation_errors_become_one_line_with_a_param_path():
    with pytest.raises(ValidationError) as caught:
        _chat(messages=[{"role": "user", "content": 5}])
    error = from_validation_error(caught.value, REQUEST_FIELDS)
    assert error.param == "messages[0].content" and "string" in error.message


@pytest.mark.parametrize(("model", "name"), [
    (None, "SmolLM2-135M-Instruct"),
    ("/models/SmolLM2-135M-Instruct.Q4_1.gguf", "SmolLM2-135M-Instruct"),
    ("/models/Llama-3.1-8B.gguf", "Llama-3.1-8B"),
    ("/models/my-hf-dir/", "my-hf-dir"),
])
def test_model_name_from_path(model, name):
    assert model_name_from_path(model) == name


def test_sampling_defaults_and_settings_are_validated():
    assert parse_sampling_defaults(["temperature=0.7", "stop=[\"x\"]"]) == {"temperature": 0.7, "stop": ["x"]}
    with pytest.raises(ValueError, match="NAME=VALUE"):
        parse_sampling_defaults(["temprature=1"])
    with pytest.raises(ValueError, match="top_p"):
        ServerSettings(model_name="m", sampling_defaults={"top_p": 2})
    with pytest.raises(ValueError, match="max_n"):
        ServerSettings(model_name="m", max_n=0)


def test_sse_event_and_merge():
    assert sse_event({"a": 1}) == b'data: {"a": 1}\n\n'

    async def numbers(start):
        for i in range(start, start + 3):
            await asyncio.sleep(0)
            yield i

    async def collect():
        return [item async for item in merge([numbers(0), numbers(10)])]

    items = asyncio.run(collect())
    assert sorted(items) == [(0, 0), (0, 1), (0, 2), (1, 10), (1, 11), (1, 12)]


def _stub_engine(alive: bool) -> SimpleNamespace:
    core = SimpleNamespace(tokenizer=None, max_model_len=128, generation_config={}, vocab_size=10)
    stats = EngineStats(0, 0, 0, 8, alive)
    return SimpleNamespace(engine=core, is_alive=alive, stats=lambda: stats, shutdown=lambda *a: None)


def _get(app, path: str, headers: dict | None = None) -> httpx.Response:
    async def run():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await client.get(path, headers=headers)
    return asyncio.run(run())


def test_health_is_503_when_the_engine_loop_is_dead_and_needs_no_key():
    settings = ServerSettings(model_name="m", api_key="k")
    assert _get(create_app(_stub_engine(True), settings), "/health").status_code == 200
    dead = _get(create_app(_stub_engine(False), settings), "/health")
    assert dead.status_code == 503 and dead.json()["error"]["code"] == "engine_dead"


def test_metrics_need_the_key_and_expose_engine_gauges():
    app = create_app(_stub_engine(True), ServerSettings(model_name="m", api_key="k"))
    assert _get(app, "/metrics").status_code == 401
    text = _get(app, "/metrics", {"Authorization": "Bearer k"}).text
    for name in ("tokenstep_requests_running", "tokenstep_requests_waiting", "tokenstep_kv_cache_usage_ratio",
                 "tokenstep_prompt_tokens_total", "tokenstep_generation_tokens_total",
                 "tokenstep_time_to_first_token_seconds", "tokenstep_time_per_output_token_seconds",
                 "tokenstep_e2e_request_latency_seconds", "tokenstep_prefix_cache_hit_tokens_total"):
        assert name in text


class _ScriptedEngine:
    """An AsyncEngine stand-in whose generate() plays a script: outputs, then maybe an error."""

    def __init__(self, script: list) -> None:
        self.engine = SimpleNamespace(tokenizer=None, max_model_len=128, generation_config={}, vocab_size=10)
        self.is_alive = True
        self.script = script
        self.aborted: list[str] = []

    def stats(self) -> EngineStats:
        return EngineStats(0, 0, 0, 8, True)

    def shutdown(self, *args) -> None:
        pass

    def abort(self, request_id: str) -> None:
        self.aborted.append(request_id)

    async def generate(self, prompt, params, prompt_token_ids=None, request_id=None):
        for item in self.script:
            if isinstance(item, Exception):
                raise item
            yield item


def _post(engine, body: dict) -> httpx.Response:
    app = create_app(engine, ServerSettings(model_name="m"))

    async def run():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await client.post("/v1/completions", json={"model": "m", "prompt": [1, 2], **body})
    return asyncio.run(run())


def test_an_error_mid_stream_is_an_error_event_then_done_and_the_request_is_aborted():
    delta = RequestOutput("r", None, [1, 2], [CompletionOutput(0, "ab", [3])])
    engine = _ScriptedEngine([delta, EngineDeadError("step failed")])
    response = _post(engine, {"stream": True, "max_tokens": 5})
    events = [line for line in response.text.split("\n\n") if line]
    assert response.status_code == 200 and json.loads(events[0][6:])["choices"][0]["text"] == "ab"
    assert json.loads(events[1][6:])["error"]["code"] == "engine_dead"
    assert events[2] == "data: [DONE]"
    assert engine.aborted  # the response's cleanup aborted the engine request


@pytest.mark.parametrize(("error", "status"), [(QueueFullError("full"), 429), (EngineDeadError("dead"), 503),
                                               (ValueError("prompt token id 99 is outside"), 400)])
def test_engine_refusals_before_the_first_token_get_their_status(error, status):
    for stream in (False, True):
        response = _post(_ScriptedEngine([error]), {"stream": stream, "max_tokens": 5})
        assert response.status_code == status and set(response.json()["error"]) == {"message", "type", "param",
                                                                                       "code"}
        if status == 429:
            assert int(response.headers["Retry-After"]) >= 1
        if status == 400:
            assert response.json()["error"]["param"] == "prompt"
