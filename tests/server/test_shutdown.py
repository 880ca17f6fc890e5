"""SIGTERM: the server stops accepting, lets in-flight requests finish (for at most --drain-timeout
seconds) and exits 0."""

from __future__ import annotations

import json
import signal
import threading
import time

import httpx
import pytest

from tests.server.harness import start_server

EXIT_WAIT_S = 30


def test_sigterm_finishes_the_stream_in_flight_then_exits_0(tiny_model, tmp_path):
    server = start_server(tiny_model, tmp_path / "server.log", "--drain-timeout", "30", api_key=None)
    body = {"model": server.model, "prompt": "Hello", "max_tokens": 200, "ignore_eos": True, "stream": True}
    try:
        with httpx.stream("POST", f"{server.url}/v1/completions", json=body, timeout=60) as response:
            lines = response.iter_lines()
            assert next(line for line in lines if line).startswith("data: {")
            server.process.send_signal(signal.SIGTERM)
            time.sleep(0.5)
            with pytest.raises(httpx.TransportError):  # no longer accepting
                httpx.get(f"{server.url}/health", timeout=2)
            events = [line for line in lines if line]
        assert events[-1] == "data: [DONE]"
        assert json.loads(events[-2][len("data: "):])["choices"][0]["finish_reason"] == "length"
        assert server.process.wait(EXIT_WAIT_S) == 0
    finally:
        if server.process.poll() is None:
            server.process.kill()


def test_drain_is_bounded(tiny_model, tmp_path):
    # One sequence at a time and 16 long requests: far more work than the 1 s drain allows.
    server = start_server(tiny_model, tmp_path / "server.log", "--drain-timeout", "1", "--max-num-seqs", "1",
                          api_key=None)
    body = {"model": server.model, "prompt": "Hello", "max_tokens": 240, "ignore_eos": True}
    statuses: list[int] = []

    def call() -> None:
        try:
            statuses.append(httpx.post(f"{server.url}/v1/completions", json=body, timeout=60).status_code)
        except httpx.TransportError:
            statuses.append(0)

    threads = [threading.Thread(target=call) for _ in range(16)]
    try:
        for thread in threads:
            thread.start()
        time.sleep(0.5)
        started = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(EXIT_WAIT_S) == 0
        assert time.monotonic() - started < 10
        for thread in threads:
            thread.join(EXIT_WAIT_S)
        assert 200 in statuses  # the drain let some finish...
        assert set(statuses) - {200} <= {503, 0} and len(set(statuses)) > 1  # ...and cut the rest off
        assert "Traceback" not in server.log_text()
    finally:
        if server.process.poll() is None:
            server.process.kill()
