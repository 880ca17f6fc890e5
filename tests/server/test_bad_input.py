"""Every bad request gets the right 4xx in OpenAI's error shape (never a 422, never a traceback),
and the server keeps serving afterwards."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.server.harness import start_server, stop_server

COMPLETIONS = "/v1/completions"
CHAT = "/v1/chat/completions"
OK = {"prompt": "Hello", "max_tokens": 2}
CHAT_OK = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
MIB = 1024 * 1024


def _completion(**fields) -> dict:
    return {**OK, **fields}


def _chat(**fields) -> dict:
    return {**CHAT_OK, **fields}


# (id, path, body (dict -> JSON with the served model added; str/bytes -> sent raw), status, param)
CASES = [
    ("temperature-nan", COMPLETIONS, '{"model": "M", "prompt": "Hi", "temperature": NaN}', 400, "temperature"),
    ("temperature-negative", COMPLETIONS, _completion(temperature=-1), 400, "temperature"),
    ("temperature-string", COMPLETIONS, _completion(temperature="hot"), 400, "temperature"),
    ("frequency-penalty-infinity", COMPLETIONS, '{"model": "M", "prompt": "Hi", "frequency_penalty": Infinity}',
     400, "frequency_penalty"),
    ("top-p-zero", COMPLETIONS, _completion(top_p=0), 400, "top_p"),
    ("top-p-above-one", COMPLETIONS, _completion(top_p=1.5), 400, "top_p"),
    ("top-k-float", COMPLETIONS, _completion(top_k=1.5), 400, "top_k"),
    ("top-k-negative", COMPLETIONS, _completion(top_k=-5), 400, "top_k"),
    ("min-p-above-one", COMPLETIONS, _completion(min_p=2), 400, "min_p"),
    ("n-zero", COMPLETIONS, _completion(n=0), 400, "n"),
    ("n-huge", COMPLETIONS, _completion(n=10**9), 400, "n"),
    ("n-string", COMPLETIONS, _completion(n="3"), 400, "n"),
    ("max-tokens-negative", COMPLETIONS, _completion(max_tokens=-1), 400, "max_tokens"),
    ("max-tokens-huge", COMPLETIONS, _completion(max_tokens=10**12), 400, "max_tokens"),
    ("max-tokens-float", COMPLETIONS, _completion(max_tokens=2.5), 400, "max_tokens"),
    ("min-tokens-above-max", COMPLETIONS, _completion(min_tokens=5, max_tokens=2), 400, "min_tokens"),
    ("five-stops", COMPLETIONS, _completion(stop=["a", "b", "c", "d", "e"]), 400, "stop"),
    ("one-megabyte-stop", COMPLETIONS, _completion(stop="x" * MIB), 400, "stop"),
    ("empty-stop", COMPLETIONS, _completion(stop=[""]), 400, "stop"),
    ("stop-number", COMPLETIONS, _completion(stop=5), 400, "stop"),
    ("stop-token-id-negative", COMPLETIONS, _completion(stop_token_ids=[-1]), 400, "stop_token_ids"),
    ("seed-negative", COMPLETIONS, _completion(seed=-1), 400, "seed"),
    ("presence-penalty-above-two", COMPLETIONS, _completion(presence_penalty=3), 400, "presence_penalty"),
    ("repetition-penalty-zero", COMPLETIONS, _completion(repetition_penalty=0), 400, "repetition_penalty"),
    ("logit-bias-bad-key", COMPLETIONS, _completion(logit_bias={"abc": 1}), 400, "logit_bias"),
    ("logit-bias-bad-value", COMPLETIONS, _completion(logit_bias={"1": 500}), 400, "logit_bias"),
    ("logit-bias-string-value", COMPLETIONS, _completion(logit_bias={"1": "high"}), 400, "logit_bias"),
    ("logit-bias-outside-vocab", COMPLETIONS, _completion(logit_bias={"999999": 1}), 400, "logit_bias"),
    ("logprobs-21", COMPLETIONS, _completion(logprobs=21), 400, "logprobs"),
    ("top-logprobs-21", CHAT, _chat(logprobs=True, top_logprobs=21), 400, "top_logprobs"),
    ("top-logprobs-without-logprobs", CHAT, _chat(top_logprobs=2), 400, "top_logprobs"),
    ("trace-101", COMPLETIONS, _completion(trace=101), 400, "trace"),
    ("logprobs-mode-unknown", COMPLETIONS, _completion(logprobs_mode="cooked"), 400, "logprobs_mode"),
    ("switch-as-string", COMPLETIONS, _completion(ignore_eos="false"), 400, "ignore_eos"),
    ("stream-as-string", COMPLETIONS, _completion(stream="yes"), 400, "stream"),
    ("empty-prompt", COMPLETIONS, _completion(prompt=""), 400, "prompt"),
    ("empty-prompt-list", COMPLETIONS, _completion(prompt=[]), 400, "prompt"),
    ("missing-prompt", COMPLETIONS, {"max_tokens": 2}, 400, "prompt"),
    ("token-id-outside-vocab", COMPLETIONS, _completion(prompt=[1, 10**6]), 400, "prompt"),
    ("token-id-negative", COMPLETIONS, _completion(prompt=[-1]), 400, "prompt"),
    ("prompt-plus-max-tokens-too-long", COMPLETIONS, _completion(prompt=[5] * 200, max_tokens=100), 400, "max_tokens"),
    ("prompt-longer-than-window", COMPLETIONS, _completion(prompt=[5] * 300), 400, "prompt"),
    ("echo-with-logprobs", COMPLETIONS, _completion(echo=True, logprobs=1), 400, "echo"),
    ("stream-options-without-stream", COMPLETIONS, _completion(stream_options={"include_usage": True}), 400,
     "stream_options"),
    ("unknown-field", COMPLETIONS, _completion(temprature=0.5), 400, "temprature"),
    ("unsupported-suffix", COMPLETIONS, _completion(suffix="end"), 400, "suffix"),
    ("both-max-token-fields", CHAT, _chat(max_completion_tokens=3), 400, "max_tokens"),
    ("no-messages", CHAT, _chat(messages=[]), 400, "messages"),
    ("unknown-role", CHAT, _chat(messages=[{"role": "wizard", "content": "Hi"}]), 400, "messages[0].role"),
    ("image-content", CHAT, _chat(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]),
     400, "messages[0].content"),
    ("template-injection", CHAT, _chat(chat_template="{{ cycler.__init__.__globals__.os.popen('id').read() }}"),
     400, "chat_template"),
    ("tools", CHAT, _chat(tools=[{"type": "function", "function": {"name": "f"}}]), 400, "tools"),
    ("body-is-a-list", COMPLETIONS, "[1, 2, 3]", 400, None),
    ("body-is-not-json", COMPLETIONS, "{not json", 400, None),
    ("body-is-bad-utf8", COMPLETIONS, b'{"prompt": "\xff"}', 400, None),
    ("unknown-model", COMPLETIONS, _completion(model="gpt-4"), 404, "model"),
    ("path-like-model", COMPLETIONS, _completion(model="../../../etc/passwd"), 404, "model"),
    ("unknown-model-chat", CHAT, _chat(model="other"), 404, "model"),
]


@pytest.fixture(scope="module")
def server(tiny_model, tmp_path_factory):
    server = start_server(tiny_model, tmp_path_factory.mktemp("log") / "server.log")
    yield server
    stop_server(server)


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, headers=server.headers, timeout=60) as client:
        yield client


def _send(http: httpx.Client, server, path: str, body, headers: dict | None = None) -> httpx.Response:
    if isinstance(body, dict):
        body = json.dumps({"model": server.model, **body})
    elif isinstance(body, str):
        body = body.replace('"M"', json.dumps(server.model))
    return http.post(path, content=body, headers={"Content-Type": "application/json", **(headers or {})})


def _assert_openai_error(response: httpx.Response, status: int, param: str | None = None) -> dict:
    assert response.status_code == status, response.text[:500]
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    assert "Traceback" not in response.text
    if param is not None:
        assert body["error"]["param"] == param, body
    return body["error"]


@pytest.mark.parametrize(("path", "body", "status", "param"), [case[1:] for case in CASES],
                         ids=[case[0] for case in CASES])
def test_bad_request_gets_an_openai_error(http, server, path, body, status, param):
    _assert_openai_error(_send(http, server, path, body), status, param)


def test_context_error_names_both_numbers(http, server):
    error = _assert_openai_error(_send(http, server, COMPLETIONS, _completion(prompt=[5] * 200, max_tokens=100)), 400)
    assert "200" in error["message"] and "100" in error["message"] and "256" in error["message"]


def test_wrong_content_type_is_415(http, server):
    response = http.post(COMPLETIONS, content=json.dumps({"model": server.model, **OK}),
                         headers={"Content-Type": "text/plain"})
    _assert_openai_error(response, 415)


def test_oversized_body_is_413(http, server):
    body = json.dumps({"model": server.model, "prompt": "x" * (3 * MIB)})
    _assert_openai_error(_send(http, server, COMPLETIONS, body), 413)


def test_oversized_chunked_body_is_413(http, server):
    def chunks():
        yield b'{"prompt": "'
        for _ in range(3):
            yield b"x" * MIB
        yield b'"}'
    response = http.post(COMPLETIONS, content=chunks(), headers={"Content-Type": "application/json"})
    _assert_openai_error(response, 413)


@pytest.mark.parametrize("path", ["/v1/models", COMPLETIONS, CHAT, "/metrics"])
@pytest.mark.parametrize("authorization", [None, "Bearer wrong", "Basic abc", f"Bearer {'x' * 10}"])
def test_missing_or_wrong_key_is_401_everywhere_but_health(server, path, authorization):
    headers = {"Content-Type": "application/json", **({"Authorization": authorization} if authorization else {})}
    response = httpx.request("GET" if "models" in path or "metrics" in path else "POST", server.url + path,
                             headers=headers, content=json.dumps({"model": server.model, **OK}))
    _assert_openai_error(response, 401)
    assert httpx.get(server.url + "/health").status_code == 200


def test_unknown_route_and_method_are_openai_errors(http):
    _assert_openai_error(http.get("/v1/nothing"), 404)
    _assert_openai_error(http.get(COMPLETIONS), 405)


@pytest.mark.parametrize("size", [32 * 1024, 1024 * 1024])
def test_huge_headers_are_refused(server, size):
    try:
        response = httpx.get(server.url + "/health", headers={"X-Big": "x" * size})
    except httpx.TransportError:
        return  # uvicorn's parser closed the connection: also a refusal
    assert response.status_code in (400, 431)


def test_a_normal_request_still_succeeds(http, server):
    response = _send(http, server, COMPLETIONS, OK)
    assert response.status_code == 200 and response.json()["choices"][0]["finish_reason"] in ("stop", "length")
    chat = _send(http, server, CHAT, CHAT_OK)
    assert chat.status_code == 200 and chat.json()["choices"][0]["message"]["role"] == "assistant"
