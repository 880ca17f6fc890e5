"""Prometheus metrics (/metrics), in a registry owned by the app (no process-wide globals).

Engine gauges (running, waiting, KV cache) are read from `AsyncEngine.stats()` at scrape time, so
they are never stale; counters and histograms are fed by a RequestTimer per engine request.
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from tokenstep.engine.async_engine import AsyncEngine
from tokenstep.outputs import RequestOutput

# Bucket edges in seconds, spanning a tiny CPU model (ms) to a big one on a busy machine (minutes).
TTFT_BUCKETS = (0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0)
TPOT_BUCKETS = (0.002, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0)
E2E_BUCKETS = (0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 60.0, 120.0, 300.0)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"  # Prometheus' text exposition format


class _EngineCollector(Collector):
    """Gauges read from the engine when Prometheus scrapes."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    def collect(self):
        stats = self.engine.stats()
        for name, doc, value in (
            ("tokenstep_requests_running", "Sequences in the running batch.", stats.num_running),
            ("tokenstep_requests_waiting", "Sequences waiting to be scheduled.", stats.num_waiting),
            ("tokenstep_kv_cache_usage_ratio", "Fraction of KV cache blocks in use (0..1).", stats.kv_cache_usage),
            ("tokenstep_kv_cache_blocks_used", "KV cache blocks in use.", stats.num_blocks_used),
            ("tokenstep_kv_cache_blocks_total", "KV cache blocks in the pool.", stats.num_blocks_total),
            ("tokenstep_engine_alive", "1 while the engine loop runs, 0 after it died.", int(stats.alive)),
        ):
            yield GaugeMetricFamily(name, doc, value=value)


class ServerMetrics:
    """Every metric of one server. `render()` is the /metrics body."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(_EngineCollector(engine))
        registry = self.registry
        self.prompt_tokens = Counter("tokenstep_prompt_tokens", "Prompt tokens processed.", registry=registry)
        self.generation_tokens = Counter("tokenstep_generation_tokens", "Tokens generated.", registry=registry)
        self.prefix_cache_hits = Counter("tokenstep_prefix_cache_hit_tokens",
                                         "Prompt tokens whose KV came from the prefix cache.", registry=registry)
        self.request_success = Counter("tokenstep_request_success", "Choices that finished, by finish_reason.",
                                       ["finish_reason"], registry=registry)
        self.time_to_first_token = Histogram("tokenstep_time_to_first_token_seconds",
                                             "Arrival to first generated token.", buckets=TTFT_BUCKETS,
                                             registry=registry)
        self.time_per_output_token = Histogram("tokenstep_time_per_output_token_seconds",
                                               "Mean time between generated tokens, per request.",
                                               buckets=TPOT_BUCKETS, registry=registry)
        self.e2e_latency = Histogram("tokenstep_e2e_request_latency_seconds", "Arrival to last token.",
                                     buckets=E2E_BUCKETS, registry=registry)

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def start_request(self) -> RequestTimer:
        return RequestTimer(self)


class RequestTimer:
    """Follows one engine request's deltas and records its counts and latencies."""

    def __init__(self, metrics: ServerMetrics) -> None:
        self.metrics = metrics
        self.arrival = time.perf_counter()
        self.first_token: float | None = None
        self.last_token = self.arrival
        self.num_steps = 0  # deltas that brought tokens: one per engine step, whatever n is

    def observe(self, output: RequestOutput) -> None:
        metrics, now = self.metrics, time.perf_counter()
        num_new = sum(len(choice.token_ids) for choice in output.outputs)
        if num_new:
            if self.first_token is None:
                self.first_token = now
                metrics.time_to_first_token.observe(now - self.arrival)
                metrics.prompt_tokens.inc(len(output.prompt_token_ids))
                metrics.prefix_cache_hits.inc(output.num_cached_tokens)
            self.last_token = now
            self.num_steps += 1
            metrics.generation_tokens.inc(num_new)
        if output.finished:
            self._finish(output)

    def _finish(self, output: RequestOutput) -> None:
        metrics = self.metrics
        metrics.e2e_latency.observe(self.last_token - self.arrival)
        if self.first_token is not None and self.num_steps > 1:
            metrics.time_per_output_token.observe((self.last_token - self.first_token) / (self.num_steps - 1))
        for choice in output.outputs:
            if choice.finish_reason is not None and choice.finish_reason != "abort":
                metrics.request_success.labels(finish_reason=str(choice.finish_reason)).inc()
