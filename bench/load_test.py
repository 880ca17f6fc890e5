"""Load test of `tokenstep serve`: N concurrent streaming clients for a bounded time, on loopback.

Each client sends a streaming /v1/completions request, reads it to the end, waits an exponential
think time (so a client's requests arrive as a Poisson process, mean --think-time seconds apart) and
repeats until --duration is over; requests still running then get --grace seconds to finish. Reports,
per client count: TTFT, TPOT (per request: decode time / (tokens - 1)) and ITL (gaps between chunks)
p50/p99, output tokens/s, requests/s and errors by kind.

    python bench/load_test.py                        # spawns a server on the bundled model
    python bench/load_test.py --clients 1 8 32 --duration 20 --max-tokens 128
    python bench/load_test.py --url http://127.0.0.1:8000 --api-key KEY --model-name NAME

Only loopback addresses are accepted. Any other OpenAI-compatible server on loopback can be measured
the same way with --url (tokenstep's `ignore_eos` keeps every output at --max-tokens; a server that
ignores it may stop early, which the token counts from `usage` then show).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from urllib.parse import urlparse

import httpx

LOOPBACK = ("127.", "localhost", "::1", "[::1]")
HEALTH_TIMEOUT_S = 180  # the default model dequantizes on load
PROMPT_WORD = " story"  # one token in SmolLM2's vocabulary: the prompt is a number, then this word repeated


@dataclass
class Sample:
    ttft: float
    tpot: float | None
    itls: list[float]
    output_tokens: int


@dataclass
class Run:
    samples: list[Sample] = field(default_factory=list)
    errors: Counter = field(default_factory=Counter)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


async def one_request(client: httpx.AsyncClient, body: dict, run: Run) -> None:
    started = time.perf_counter()
    arrivals, tokens = [], 0
    try:
        async with client.stream("POST", "/v1/completions", json=body) as response:
            if response.status_code != 200:
                await response.aread()
                run.errors[f"http {response.status_code}"] += 1
                return
            async for line in response.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if "error" in chunk:
                    run.errors[f"stream {chunk['error'].get('code')}"] += 1
                    return
                if chunk.get("usage"):
                    tokens = chunk["usage"]["completion_tokens"]
                elif any(c.get("text") for c in chunk["choices"]):
                    arrivals.append(time.perf_counter())
    except httpx.HTTPError as error:
        run.errors[type(error).__name__] += 1
        return
    if not arrivals:
        run.errors["no tokens"] += 1
        return
    end, ttft = arrivals[-1], arrivals[0] - started
    tpot = (end - arrivals[0]) / (tokens - 1) if tokens > 1 else None
    run.samples.append(Sample(ttft, tpot, [b - a for a, b in zip(arrivals, arrivals[1:])], tokens))


async def client_loop(client: httpx.AsyncClient, args: argparse.Namespace, deadline: float, rng: random.Random,
                      run: Run) -> None:
    while True:
        await asyncio.sleep(rng.expovariate(1 / args.think_time) if args.think_time > 0 else 0)
        if time.monotonic() >= deadline:
            return
        # A number first, so no two prompts share a prefix: the prefix cache would hide the prefill.
        prompt = f"{rng.randrange(10**6)}:" + PROMPT_WORD * args.prompt_tokens
        body = {"model": args.model_name, "prompt": prompt, "max_tokens": args.max_tokens, "temperature": 0.8,
                "seed": rng.randrange(2**31), "ignore_eos": True, "stream": True,
                "stream_options": {"include_usage": True}}
        await one_request(client, body, run)


async def measure(args: argparse.Namespace, num_clients: int) -> tuple[Run, float]:
    run = Run()
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    limits = httpx.Limits(max_connections=num_clients + 4)
    async with httpx.AsyncClient(base_url=args.url, headers=headers, limits=limits, timeout=args.duration + args.grace
                                 + 60) as client:
        started = time.monotonic()
        deadline = started + args.duration
        loops = [client_loop(client, args, deadline, random.Random(1000 * num_clients + i), run)
                 for i in range(num_clients)]
        try:
            await asyncio.wait_for(asyncio.gather(*loops), timeout=args.duration + args.grace)
        except asyncio.TimeoutError:
            run.errors["cut off after grace"] += 1
        return run, time.monotonic() - started


def report(num_clients: int, run: Run, elapsed: float) -> dict:
    ttfts = [s.ttft for s in run.samples]
    tpots = [s.tpot for s in run.samples if s.tpot is not None]
    itls = [gap for s in run.samples for gap in s.itls]
    tokens = sum(s.output_tokens for s in run.samples)
    return {"clients": num_clients, "requests": len(run.samples), "errors": dict(run.errors),
            "elapsed_s": round(elapsed, 1), "output_tok_s": round(tokens / elapsed, 1),
            "requests_s": round(len(run.samples) / elapsed, 2),
            **{f"{name}_{q}_ms": round(1000 * percentile(values, q), 1)
               for name, values in (("ttft", ttfts), ("tpot", tpots), ("itl", itls)) for q in (50, 99)}}


def print_table(rows: list[dict]) -> None:
    columns = ["clients", "requests", "output_tok_s", "requests_s", "ttft_50_ms", "ttft_99_ms", "tpot_50_ms",
               "tpot_99_ms", "itl_50_ms", "itl_99_ms", "errors"]
    print(" | ".join(columns))
    for row in rows:
        print(" | ".join(str(row[c] if c != "errors" else (row[c] or 0)) for c in columns))


def spawn_server(args: argparse.Namespace) -> subprocess.Popen:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    args.url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "tokenstep", "serve", "--port", str(port),
               "--max-num-seqs", str(max(64, max(args.clients))), "--dtype", args.dtype]
    if args.model:
        command += ["--model", args.model]
    env = dict(os.environ, TOKENSTEP_API_KEY="")
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=sys.stderr)
    deadline = time.monotonic() + HEALTH_TIMEOUT_S
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx.get(f"{args.url}/health", timeout=1).status_code == 200:
                args.model_name = httpx.get(f"{args.url}/v1/models").json()["data"][0]["id"]
                return process
        except httpx.TransportError:
            time.sleep(0.5)
    process.kill()
    raise SystemExit("the server did not start")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a running server (loopback only); default: spawn one")
    parser.add_argument("--model", help="model for the spawned server (default: the bundled one)")
    parser.add_argument("--dtype", default="bfloat16", help="dtype of the spawned server (default bfloat16)")
    parser.add_argument("--model-name", help="the `model` field for --url (default: asked from /v1/models)")
    parser.add_argument("--api-key", help="key for --url")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32], help="client counts (default 1 8 32)")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of new requests per count (default 20)")
    parser.add_argument("--grace", type=float, default=60.0, help="seconds for requests still running (default 60)")
    parser.add_argument("--think-time", type=float, default=0.5, help="mean seconds between a client's requests")
    parser.add_argument("--prompt-tokens", type=int, default=128, help="prompt length, about (default 128)")
    parser.add_argument("--max-tokens", type=int, default=128, help="tokens per request (default 128)")
    parser.add_argument("--json", help="also write the results to this file")
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    process = None
    if args.url is None:
        process = spawn_server(args)
    elif not (urlparse(args.url).hostname or "").startswith(LOOPBACK):
        raise SystemExit("load tests target this machine only: give a loopback --url")
    elif args.model_name is None:
        args.model_name = httpx.get(f"{args.url}/v1/models", headers={"Authorization": f"Bearer {args.api_key}"}
                                    if args.api_key else {}).json()["data"][0]["id"]
    try:
        rows = [report(n, *asyncio.run(measure(args, n))) for n in args.clients]
    finally:
        if process is not None:
            process.send_signal(signal.SIGTERM)
            process.wait(60)
    print_table(rows)
    if args.json:
        with open(args.json, "w") as sink:
            json.dump(rows, sink, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
