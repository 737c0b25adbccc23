"""The server's Prometheus metrics (``/metrics``), in a registry of its own.

Counts that the engine core keeps (queue lengths, KV blocks, prefix-cache lookups) come with each of
its output batches and are read at scrape time; latencies and token counts are recorded in this front
end as its requests' tokens arrive (with several front ends, each counts its own requests).
"""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from .async_engine import AsyncEngine, RequestStream

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75,
                    1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0)


class _EngineCollector:
    """The engine core's counters as its latest batch gave them."""

    def __init__(self, engine: AsyncEngine):
        self.engine = engine

    def collect(self):
        stats = self.engine.stats
        yield GaugeMetricFamily("anydev_requests_running", "Requests holding KV blocks and being stepped",
                                value=stats.running)
        yield GaugeMetricFamily("anydev_requests_waiting", "Requests waiting to be admitted (or preempted)",
                                value=stats.waiting)
        yield GaugeMetricFamily("anydev_kv_blocks_used", "KV cache blocks held by requests", value=stats.kv_blocks_used)
        yield GaugeMetricFamily("anydev_kv_blocks_total", "KV cache blocks", value=stats.kv_blocks_total)
        yield GaugeMetricFamily("anydev_prefix_cache_blocks", "Full KV blocks in the prefix cache",
                                value=stats.prefix_cache_blocks)
        yield GaugeMetricFamily("anydev_prefix_cache_hit_rate",
                                "Share of prompt tokens found in the prefix cache", value=stats.prefix_cache_hit_rate)
        yield CounterMetricFamily("anydev_prefix_cache_queried_tokens", "Prompt tokens looked up in the prefix cache",
                                  value=stats.prefix_cache_queried_tokens)
        yield CounterMetricFamily("anydev_prefix_cache_hit_tokens", "Prompt tokens found in the prefix cache",
                                  value=stats.prefix_cache_hit_tokens)
        yield CounterMetricFamily("anydev_preemptions", "Requests preempted for KV blocks", value=stats.preemptions)
        for kind, what in (("prefill", "with prompt tokens (prefill and mixed)"), ("decode", "of decodes only")):
            yield CounterMetricFamily(f"anydev_{kind}_steps", f"Engine steps {what}",
                                      value=getattr(stats, f"{kind}_steps"))
            yield CounterMetricFamily(f"anydev_{kind}_step_tokens", f"Tokens of the engine steps {what}",
                                      value=getattr(stats, f"{kind}_tokens"))
            yield CounterMetricFamily(f"anydev_{kind}_step_seconds", f"Wall seconds of the engine steps {what}, from "
                                      "building each to its tokens back (overlapped steps counted once)",
                                      value=getattr(stats, f"{kind}_seconds"))


class ServerMetrics:
    def __init__(self, engine: AsyncEngine):
        self.registry = CollectorRegistry()
        self.registry.register(_EngineCollector(engine))
        self.prompt_tokens = Counter("anydev_prompt_tokens", "Prompt tokens of finished requests",
                                     registry=self.registry)
        self.generation_tokens = Counter("anydev_generation_tokens", "Tokens generated for finished requests",
                                         registry=self.registry)
        self.requests = Counter("anydev_requests", "Finished requests by finish reason", ["finish_reason"],
                                registry=self.registry)
        self.rejected = Counter("anydev_requests_rejected", "Requests refused, by HTTP status", ["status"],
                                registry=self.registry)
        self.dropped = Counter("anydev_connections_dropped", "Connections closed by the server: its timeouts "
                               "(--first-request-timeout, --read-timeout, --send-timeout) and its cap (--max-connections), "
                               "by reason", ["reason"],
                               registry=self.registry)
        self.ttft = Histogram("anydev_time_to_first_token_seconds", "Time from arrival to the first token",
                              buckets=_LATENCY_BUCKETS, registry=self.registry)
        self.itl = Histogram("anydev_inter_token_latency_seconds", "Time between a request's successive tokens",
                             buckets=_LATENCY_BUCKETS, registry=self.registry)

    # called by the AsyncEngine as tokens arrive
    def first_token(self, seconds: float) -> None:
        self.ttft.observe(seconds)

    def next_token(self, seconds: float) -> None:
        self.itl.observe(seconds)

    def finished(self, seq: RequestStream) -> None:
        self.prompt_tokens.inc(len(seq.prompt))
        self.generation_tokens.inc(len(seq.output))
        self.requests.labels(seq.finish_reason or "unknown").inc()
