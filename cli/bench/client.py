"""The streaming client of the serving benchmarks (``anydev bench serve``, benchmarks/serve_bench.py):
one request over a raw HTTP/1.1 connection, each token's arrival timed from the per-chunk usage."""
from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field


@dataclass
class Result:
    """One request as the client saw it; ``ok``: every token asked for came back."""

    ok: bool = False
    error: str = ""
    ttft: float | None = None                       # seconds to the first token
    itl: list[float] = field(default_factory=list)  # seconds between tokens (a chunk's tokens share its gap)
    latency: float | None = None                    # seconds to the last token
    output_tokens: int = 0
    prompt_tokens: int = 0


async def stream_request(port: int, prompt: list[int], max_tokens: int, model: str = "bench",
                         host: str = "127.0.0.1", api_key: str | None = None) -> Result:
    """One streamed /v1/completions of ``max_tokens`` tokens (``ignore_eos``, greedy), usage in every
    chunk (``continuous_usage_stats``) so that each token's arrival is known."""
    result = Result()
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                       "ignore_eos": True, "stream": True,
                       "stream_options": {"include_usage": True, "continuous_usage_stats": True}}).encode()
    auth = f"Authorization: Bearer {api_key}\r\n".encode() if api_key else b""
    start = time.perf_counter()
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: " + host.encode() + b"\r\nContent-Type: application/json\r\n"
                     + auth + b"Connection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        await writer.drain()
        status = (await reader.readline()).split()
        if len(status) < 2 or status[1] != b"200":
            result.error = f"HTTP {status[1:2]}: {(await reader.read())[-300:]!r}"
            return result
        last, done = start, 0
        while line := await reader.readline():    # chunked transfer framing lines are skipped below
            line = line.strip()
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            now = time.perf_counter()
            chunk = json.loads(line[6:])
            usage = chunk.get("usage")
            if "error" in chunk or usage is None:
                result.error = str(chunk.get("error", "a chunk without usage"))
                return result
            new = usage["completion_tokens"] - done
            if new > 0:
                if result.ttft is None:
                    result.ttft = now - start
                    new -= 1
                result.itl += [(now - last) / new] * new if new > 0 else []
                done, last = usage["completion_tokens"], now
            result.prompt_tokens = usage["prompt_tokens"]
        result.output_tokens = done
        result.latency = last - start
        result.ok = done == max_tokens
        if not result.ok:
            result.error = f"{done} of {max_tokens} tokens"
        return result
    finally:
        writer.close()
