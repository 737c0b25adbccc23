"""What serve_bench's own client costs: its CPU time per streamed token, against a fake server that
sends every stream one anydev-shaped SSE event per tick (a server step), so no engine is involved.

    python benchmarks/serve_client_cost.py --streams 64,256 --tick-ms 2

For each stream count: the client's CPU time per event, the CPU it needs per tick (streams x that:
one asyncio process cannot keep up once this passes the tick) and its share of the tick, the ITL p50
it measured against the tick it was sent at, and its event loop's lag p99. serve_bench's
--client-processes spreads the streams when one process is the bound.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import socket
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_bench  # noqa: E402  (the client measured)

PROMPT = [1] * 512


def event(completion_tokens: int) -> bytes:
    """One streamed completion chunk as anydev serve sends it (usage in every chunk), chunked framing."""
    chunk = {"id": "cmpl-0123456789abcdef", "object": "text_completion", "created": 1764630000, "model": "bench",
             "choices": [{"index": 0, "text": " tok", "logprobs": None, "finish_reason": None}],
             "usage": {"prompt_tokens": len(PROMPT), "completion_tokens": completion_tokens,
                       "total_tokens": len(PROMPT) + completion_tokens}}
    data = b"data: " + json.dumps(chunk).encode() + b"\n\n"
    return b"%x\r\n" % len(data) + data + b"\r\n"


DONE = b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n"


def fake_server(port: int, tokens: int, tick_s: float, ready) -> None:
    """Every tick, each open stream gets its next event; after ``tokens`` of them, [DONE]. ``ready``
    is set once it listens."""
    async def main():
        streams = []

        async def accept(reader, writer):
            await reader.readuntil(b"\r\n\r\n")
            await reader.read(1 << 16)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
            streams.append([writer, 0])

        await asyncio.start_server(accept, "127.0.0.1", port)
        ready.set()
        while True:
            started = time.perf_counter()
            for stream in list(streams):
                stream[1] += 1
                stream[0].write(event(stream[1]))
                if stream[1] == tokens:
                    stream[0].write(DONE)
                    stream[0].close()
                    streams.remove(stream)
            await asyncio.sleep(max(0.0, tick_s - (time.perf_counter() - started)))

    asyncio.run(main())


async def measure(port: int, streams: int, tokens: int):
    lags = []
    probe = asyncio.ensure_future(serve_bench._probe_lag(lags))
    cpu, wall = time.process_time(), time.perf_counter()
    results = await asyncio.gather(*[serve_bench.stream_request(port, PROMPT, tokens) for _ in range(streams)])
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    probe.cancel()
    return results, cpu, wall, lags


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--streams", default="64,256")
    p.add_argument("--tokens", type=int, default=128, help="events per stream")
    p.add_argument("--tick-ms", type=float, default=2.0, help="the fake server's step")
    args = p.parse_args(argv)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    context = multiprocessing.get_context("spawn")
    ready = context.Event()
    server = context.Process(target=fake_server, args=(port, args.tokens, args.tick_ms / 1000, ready), daemon=True)
    server.start()
    try:
        if not ready.wait(60):
            raise SystemExit("the fake server did not start within 60 s")
        print(f"serve_bench's client against a fake server: {args.tokens} events per stream, one per {args.tick_ms} ms tick")
        for streams in (int(n) for n in args.streams.split(",")):
            results, cpu, wall, lags = asyncio.run(measure(port, streams, args.tokens))
            if not all(r.ok for r in results):
                raise SystemExit(f"{sum(not r.ok for r in results)} streams failed: {results[0].error}")
            per_event = cpu / (streams * args.tokens)
            itl = [x for r in results for x in r.itl]
            print(f"{streams:>4} streams: client CPU {per_event * 1e6:6.1f} us per event, {per_event * streams * 1e3:6.2f} ms "
                  f"per tick ({per_event * streams * 1e3 / args.tick_ms:.2f}x the tick); ITL p50 {np.percentile(itl, 50) * 1e3:.2f} ms "
                  f"({np.percentile(itl, 50) * 1e3 / args.tick_ms:.2f}x the tick); loop lag p99 "
                  f"{np.percentile(lags, 99) * 1e3:.1f} ms; busy {100 * cpu / wall:.0f}% of {wall:.2f} s")
    finally:
        server.terminate()
        server.join()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
