"""The server's log lines: one access line per request, and a stats line every few seconds (vLLM's).

    anydev serve: 127.0.0.1:50312 "POST /v1/completions HTTP/1.1" 200 0.184 s
    anydev serve: stats: running 2 reqs, waiting 0 reqs, prompt 48.0 tokens/s, generation 31.5 tokens/s,
        KV cache 6.2% used, prefix cache hit rate 40.0%

An access line is written when the answer is complete (a stream: when its last event is sent), so
its duration is the request's whole time in the server. ``--disable-log-requests`` and
``--disable-log-stats`` turn them off (vLLM's flags), ``--log-stats-interval`` sets the period. The
stats line counts this front end's requests (each front end writes its own); it is skipped while the
server stays idle.
"""
from __future__ import annotations

import threading
import time
from typing import Callable


def _write(line: str) -> None:
    print(line, flush=True)


class AccessLog:
    """ASGI middleware: one line per HTTP request, with its method, path, status and duration."""

    def __init__(self, app, write: Callable[[str], None] = _write):
        self.app, self.write = app, write

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = None

        async def sending(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            client = scope.get("client")
            peer = f"{client[0]}:{client[1]}" if client else "-"
            shown = status if status is not None else "500 (no answer)"   # the app raised before answering
            self.write(f'anydev serve: {peer} "{scope["method"]} {scope["path"]} HTTP/{scope.get("http_version", "1.1")}" '
                       f"{shown} {time.perf_counter() - start:.3f} s")


class StatsLog:
    """A thread writing the stats line every ``interval`` seconds from the engine core's latest
    counters and this front end's ``metrics`` (:class:`~.metrics.ServerMetrics`)."""

    def __init__(self, engine, metrics, interval: float, write: Callable[[str], None] = _write):
        self.engine, self.metrics, self.interval, self.write = engine, metrics, interval, write
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="anydev-stats-log", daemon=True)

    def start(self) -> "StatsLog":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _tokens(self) -> tuple[float, float]:
        """(prompt tokens of finished requests, tokens generated) so far."""
        sample = self.metrics.registry.get_sample_value
        generated = ((sample("anydev_time_to_first_token_seconds_count") or 0.0)
                     + (sample("anydev_inter_token_latency_seconds_count") or 0.0))   # each token is in one of them
        return sample("anydev_prompt_tokens_total") or 0.0, generated

    def _run(self) -> None:
        last_time, (last_prompt, last_generated) = time.monotonic(), self._tokens()
        was_idle = True
        while not self._stop.wait(self.interval):
            now, (prompt, generated) = time.monotonic(), self._tokens()
            seconds = max(now - last_time, 1e-9)
            stats = self.engine.stats
            idle = prompt == last_prompt and generated == last_generated and stats.running + stats.waiting == 0
            if not (idle and was_idle):         # one idle line after activity, then quiet
                try:
                    self.write(self.line(stats, (prompt - last_prompt) / seconds, (generated - last_generated) / seconds))
                except (OSError, ValueError):   # stdout closed: the server is going away
                    return
            last_time, last_prompt, last_generated, was_idle = now, prompt, generated, idle

    @staticmethod
    def line(stats, prompt_per_s: float, generation_per_s: float) -> str:
        used = 100.0 * stats.kv_blocks_used / stats.kv_blocks_total if stats.kv_blocks_total else 0.0
        return (f"anydev serve: stats: running {stats.running} reqs, waiting {stats.waiting} reqs, "
                f"prompt {prompt_per_s:.1f} tokens/s, generation {generation_per_s:.1f} tokens/s, "
                f"KV cache {used:.1f}% used, prefix cache hit rate {100.0 * stats.prefix_cache_hit_rate:.1f}%")

