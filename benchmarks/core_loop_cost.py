"""The host time the serving path adds per decode step, without a model: the engine core's loop work
per step and a front end's work per token, for N streams that each get one token a step.

    python benchmarks/core_loop_cost.py --streams 64,256 --steps 200

A stub engine stands in for :class:`~anydev.core.InferEngine` (each step appends one token to every
running sequence: no forward, no scheduler), so what is timed is only what serving adds to
``generate_ids``' loop, on one thread, with nothing else running:

* ``core``: :class:`~anydev.serving.engine_core.EngineCore`'s work after a step (its outputs for the
  step's sequences, the deadlines, one :class:`~anydev.serving.messages.EngineOutputs` per front end
  encoded and sent, the socket polled), µs per step;
* ``front end``: one front end's :meth:`AsyncEngine._take <anydev.serving.async_engine.AsyncEngine._take>`
  of each batch (decoded, each token through the request's ``OutputText``, the streams woken) and a
  server-sent event per stream and step as ``anydev serve`` streams it (``stream_events``, its usage in
  every chunk as serve_bench asks), µs per token.

Token ids are drawn from the model's vocabulary (``--vocab``) with the demo checkpoint's tokenizer, as
serve_bench's random-weight models have it (most ids then read as no text). The garbage collector runs
as usual. Each figure is the median over the steps of ``--repeats`` runs of ``--steps`` steps (the
median, so that a step another process delayed on a busy machine does not move it).
"""
from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
from dataclasses import dataclass, field

import zmq

from anydev.core import SamplingParams
from anydev.core.loading.checkpoint import demo_checkpoint
from anydev.core.output import OutputText
from anydev.core.sched.sequence import Sequence, Status
from anydev.core.stats import EngineCounters


@dataclass
class StubEngine:
    """What EngineCore asks of an engine; :meth:`step` gives every running sequence one token."""

    vocab: int
    seqs: list[Sequence] = field(default_factory=list)
    pending_graphs: list = field(default_factory=list)
    rng: random.Random = field(default_factory=lambda: random.Random(0))

    @property
    def has_unfinished(self) -> bool:
        return bool(self.seqs)

    def add_request(self, prompt_ids, sampling):
        seq = Sequence(len(self.seqs), list(prompt_ids), sampling.max_new_tokens, sampling=sampling,
                       seq_id=len(self.seqs), status=Status.RUNNING)
        self.seqs.append(seq)
        return seq

    def step(self) -> list[Sequence]:
        for seq in self.seqs:
            seq.output.append(self.rng.randrange(self.vocab))
        return self.seqs

    def stats(self) -> EngineCounters:
        return EngineCounters(len(self.seqs), 0, 4 * len(self.seqs), 4096, 0, 0.0, 0, 0, 0)

    def abort(self, seq, reason) -> None:
        pass


def measure(streams: int, steps: int, vocab: int, tokenizer) -> tuple[list[float], list[float]]:
    """Each step's core seconds, and the front end's seconds per token of each step."""
    from anydev.serving.async_engine import AsyncEngine, RequestStream
    from anydev.serving.engine_core import EngineCore, client_identity, new_address, remove_address
    from anydev.serving.messages import AddRequest
    from anydev.serving.sse import Choice, stream_events

    address = new_address()
    engine = StubEngine(vocab)
    core = EngineCore(engine, address, {client_identity(0)})
    context = zmq.Context.instance()
    core._socket = context.socket(zmq.ROUTER)
    core._socket.setsockopt(zmq.SNDHWM, 0)
    core._socket.bind(address)
    poller = zmq.Poller()
    poller.register(core._socket, zmq.POLLIN)
    dealer = context.socket(zmq.DEALER)
    dealer.setsockopt(zmq.IDENTITY, client_identity(0))
    dealer.setsockopt(zmq.RCVHWM, 0)
    dealer.connect(address)
    dealer.send(b"hello")                # the ROUTER knows the front end once it has heard from it
    core._socket.recv_multipart()
    sampling = SamplingParams(max_new_tokens=steps + 1, ignore_eos=True)
    for i in range(streams):
        core._add(client_identity(0), AddRequest(str(i), [1] * 16, sampling))
    core._pending.clear()

    # the front end: an AsyncEngine that is never connected (its batches are handed to _take here)
    front = AsyncEngine.__new__(AsyncEngine)
    front.observer, front._streams, front.stats = None, {}, None
    loop = asyncio.new_event_loop()
    state = _State(tokenizer)
    events = []
    for i in range(streams):
        stream = RequestStream(str(i), [1] * 16, sampling, text=OutputText(tokenizer, []))
        stream._admitted = loop.create_future()
        stream._admitted.set_result(None)
        stream.admitted = True
        front._streams[stream.request_id] = stream
        events.append(stream_events(state, [Choice(0, stream)], f"cmpl-{i}", 0, False, True, True))

    async def pump_events():
        for gen in events:           # completions with per-step usage: one event a stream and step
            await gen.__anext__()

    from anydev.serving.messages import FROM_CORE
    core_s, front_s = [], []
    for _ in range(steps):
        got = engine.step()
        start = time.perf_counter()
        dict(poller.poll(0))
        core._collect(got)
        core._expire(time.monotonic())
        core._flush(events_seen=True)
        core_s.append(time.perf_counter() - start)
        payload = dealer.recv()
        start = time.perf_counter()
        front._take(FROM_CORE.decode(payload))
        loop.run_until_complete(pump_events())
        front_s.append(time.perf_counter() - start)
    for gen in events:
        loop.run_until_complete(gen.aclose())
    loop.run_until_complete(asyncio.sleep(0))          # the inner generators' closing, which that scheduled
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()
    dealer.close(0)
    core._socket.close(0)
    remove_address(address)
    return core_s, [t / streams for t in front_s]


class _State:
    """The parts of ServerState that stream_events reads."""

    def __init__(self, tokenizer):
        self.tokenizer, self.model_name = tokenizer, "bench"
        self.engine = self

    def abort(self, stream) -> None:
        pass


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--streams", default="64,256")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--vocab", type=int, default=32000)
    args = p.parse_args(argv)
    tokenizer = demo_checkpoint().tokenizer
    print(f"{'streams':>7} {'core µs/step':>12} {'core µs/token':>13} {'front end µs/token':>18}")
    for streams in (int(s) for s in args.streams.split(",")):
        runs = [measure(streams, args.steps, args.vocab, tokenizer) for _ in range(args.repeats)]
        core = statistics.median(t for r in runs for t in r[0]) * 1e6
        front = statistics.median(t for r in runs for t in r[1]) * 1e6
        print(f"{streams:>7} {core:>12.1f} {core / streams:>13.2f} {front:>18.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
