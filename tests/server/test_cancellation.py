"""Clients that go away: 200 concurrent requests cancelled at random points (before the first token,
mid-stream, non-streamed) leave nothing running, waiting or holding KV blocks, and the server serves on."""

from __future__ import annotations

import asyncio
import random
import time

import httpx
import pytest

from tests.server.harness import metric, start_server, stop_server

NUM_REQUESTS = 200
MAX_TOKENS = 230  # with a ~5-token prompt, nearly the tiny model's whole 256-token window
SETTLE_TIMEOUT_S = 30


@pytest.fixture(scope="module")
def server(tiny_model, tmp_path_factory):
    server = start_server(tiny_model, tmp_path_factory.mktemp("log") / "server.log", "--max-waiting", "512",
                          api_key=None)
    yield server
    stop_server(server)


def _body(server, index: int, stream: bool) -> dict:
    return {"model": server.model, "prompt": f"Story {index}:", "max_tokens": MAX_TOKENS, "ignore_eos": True,
            "temperature": 1.0, "seed": index, "stream": stream}


async def _read_some(client: httpx.AsyncClient, body: dict, num_events: int) -> None:
    """Read `num_events` SSE lines, then hang up (leaving the block closes the unfinished connection)."""
    async with client.stream("POST", "/v1/completions", json=body) as response:
        assert response.status_code == 200
        seen = 0
        async for line in response.aiter_lines():
            seen += bool(line)
            if seen >= num_events:
                return


async def _one(client: httpx.AsyncClient, server, index: int, rng: random.Random) -> None:
    mode = rng.choice(["events", "timer", "non-stream"])
    if mode == "events":  # mid-stream, after a random number of chunks (0 = right after the headers)
        await _read_some(client, _body(server, index, True), rng.randint(0, 40))
        return
    body = _body(server, index, mode == "timer")
    request = _read_some(client, body, 10**6) if mode == "timer" else client.post("/v1/completions", json=body)
    try:  # a timer cancels it anywhere: before it is queued, before the first token, mid-way
        await asyncio.wait_for(request, timeout=rng.uniform(0.0, 1.0))
    except asyncio.TimeoutError:
        pass


async def _cancel_many(server) -> None:
    rng = random.Random(1234)
    limits = httpx.Limits(max_connections=NUM_REQUESTS + 8, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=server.url, limits=limits, timeout=60) as client:
        await asyncio.gather(*(_one(client, server, i, rng) for i in range(NUM_REQUESTS)))


def _engine_state(server) -> tuple[float, float, float, str]:
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    return (metric(text, "tokenstep_requests_running"), metric(text, "tokenstep_requests_waiting"),
            metric(text, "tokenstep_kv_cache_blocks_used"), text)


def test_cancelled_requests_free_the_engine(server):
    asyncio.run(_cancel_many(server))
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while True:
        running, waiting, blocks, text = _engine_state(server)
        if (running, waiting, blocks) == (0, 0, 0) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert (running, waiting, blocks) == (0, 0, 0), server.log_text()[-2000:]
    assert metric(text, "tokenstep_kv_cache_usage_ratio") == 0
    assert metric(text, "tokenstep_engine_alive") == 1
    # Aborted, not run to the end: far fewer tokens than 200 full generations.
    assert metric(text, "tokenstep_generation_tokens_total") < NUM_REQUESTS * MAX_TOKENS / 2
    response = httpx.post(f"{server.url}/v1/completions", timeout=60,
                          json={"model": server.model, "prompt": "Hello", "max_tokens": 5, "ignore_eos": True})
    assert response.status_code == 200 and response.json()["usage"]["completion_tokens"] == 5
    assert "Traceback" not in server.log_text()
