"""The engine core's batches (serving/engine_core.py, serving/messages.py): a step's plain tokens (one
new token of a request that goes on and asks for no logprobs) travel as the flat ``plain_ids`` and
``plain_tokens`` lists, everything else as a RequestOutput; a front end makes the same streams of
either, including a request whose first token comes in the batch that admits it."""
from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field

import pytest
import zmq

from anydev.core import SamplingParams
from anydev.core.sched.sequence import Sequence, Status
from anydev.core.stats import EngineCounters
from anydev.serving.async_engine import AsyncEngine, RequestStream
from anydev.serving.engine_core import EngineCore, client_identity, new_address, remove_address
from anydev.serving.messages import FROM_CORE, AddRequest


@dataclass
class StubEngine:
    """What EngineCore asks of an engine: a step gives every running sequence a token and ends those
    at ``max_new_tokens`` ("length")."""

    seqs: list[Sequence] = field(default_factory=list)
    pending_graphs: list = field(default_factory=list)
    rng: random.Random = field(default_factory=lambda: random.Random(0))

    @property
    def has_unfinished(self) -> bool:
        return any(seq.status is Status.RUNNING for seq in self.seqs)

    def add_request(self, prompt_ids, sampling):
        seq = Sequence(len(self.seqs), list(prompt_ids), sampling.max_new_tokens, sampling=sampling,
                       seq_id=len(self.seqs), status=Status.RUNNING)
        self.seqs.append(seq)
        return seq

    def step(self) -> list[Sequence]:
        running = [seq for seq in self.seqs if seq.status is Status.RUNNING]
        for seq in running:
            seq.output.append(self.rng.randrange(1000))
            if len(seq.output) == seq.max_new_tokens:
                seq.status, seq.finish_reason = Status.FINISHED, "length"
        return running

    def stats(self) -> EngineCounters:
        return EngineCounters(len(self.seqs), 0, 0, 64, 0, 0.0, 0, 0, 0)

    def abort(self, seq, reason) -> None:
        seq.status, seq.finish_reason = Status.FINISHED, reason


@pytest.fixture
def wire():
    """An EngineCore over a stub engine with one front end's socket; ``batch()`` runs a step and the
    core's work after it, and returns the batch the front end got."""
    address, engine = new_address(), StubEngine()
    core = EngineCore(engine, address, {client_identity(0)})
    context = zmq.Context.instance()
    core._socket = context.socket(zmq.ROUTER)
    core._socket.bind(address)
    dealer = context.socket(zmq.DEALER)
    dealer.setsockopt(zmq.IDENTITY, client_identity(0))
    dealer.connect(address)
    dealer.send(b"hello")
    core._socket.recv_multipart()

    def batch():
        core._collect(engine.step())
        core._flush(events_seen=True)
        assert dealer.poll(5000), "the core sent no batch"
        return FROM_CORE.decode(dealer.recv())

    yield core, engine, batch
    dealer.close(0)
    core._socket.close(0)
    remove_address(address)


def _add(core, request_id: str, **sampling) -> None:
    core._add(client_identity(0), AddRequest(request_id, [1, 2, 3], SamplingParams(ignore_eos=True, **sampling)))


def test_plain_tokens_go_flat_and_the_rest_as_outputs(wire):
    core, engine, batch = wire
    _add(core, "a", max_new_tokens=8)
    _add(core, "b", max_new_tokens=8, logprobs=1)
    _add(core, "c", max_new_tokens=2)
    first = batch()
    a, b, c = engine.seqs
    assert first.plain_ids == ["a", "c"] and first.plain_tokens == [a.output[0], c.output[0]]
    by_id = {}
    for out in first.outputs:
        by_id.setdefault(out.request_id, []).append(out)
    assert [o.new_token_ids for o in by_id["a"]] == [[]] and [o.new_token_ids for o in by_id["c"]] == [[]]  # admitted
    assert [o.new_token_ids for o in by_id["b"]] == [[], b.output]          # admitted, then its token with logprobs
    assert by_id["b"][1].new_logprobs == []
    second = batch()
    assert second.plain_ids == ["a"] and second.plain_tokens == [a.output[1]]      # each token sent once
    (b_out, c_out) = sorted(second.outputs, key=lambda o: o.request_id)
    assert (b_out.request_id, b_out.new_token_ids, b_out.finish_reason) == ("b", b.output[1:], None)
    assert (c_out.request_id, c_out.new_token_ids, c_out.finish_reason) == ("c", c.output[1:], "length")


def test_a_front_end_makes_the_same_streams_of_plain_tokens_and_outputs(wire):
    core, engine, batch = wire
    front = AsyncEngine.__new__(AsyncEngine)       # never connected: the batches are handed to _take here
    front.observer, front._streams, front.stats = None, {}, None
    loop = asyncio.new_event_loop()
    streams = {}
    for request_id, sampling in (("a", dict(max_new_tokens=5)), ("b", dict(max_new_tokens=5, logprobs=1)),
                                 ("c", dict(max_new_tokens=2))):
        stream = RequestStream(request_id, [1, 2, 3], SamplingParams(**sampling))
        stream._admitted = loop.create_future()
        front._streams[request_id] = streams[request_id] = stream
        _add(core, request_id, **sampling)
    try:
        for _ in range(5):
            front._take(batch())
        for stream, seq in zip(streams.values(), engine.seqs):
            assert stream.admitted and stream._admitted.done() and stream._admitted.exception() is None
            assert stream.output == seq.output, stream.request_id
        assert [s.finish_reason for s in streams.values()] == ["length", "length", "length"]
        assert front._streams == {}
    finally:
        loop.close()
