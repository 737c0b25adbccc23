"""A streamed answer's events go out together when they are ready together (the front end fell behind
the engine), and the body they make is the same as event by event."""
from __future__ import annotations

import asyncio

from anydev.core import SamplingParams
from anydev.core.loading.checkpoint import demo_checkpoint
from anydev.core.output import OutputText
from anydev.serving.async_engine import RequestStream
from anydev.serving.sse import _events, stream_events


class State:
    """What stream_events reads of the server's state."""

    def __init__(self):
        self.tokenizer, self.model_name, self.engine = demo_checkpoint().tokenizer, "demo", self
        self.aborted = []

    def abort(self, stream) -> None:
        self.aborted.append(stream)


def a_stream(state: State) -> RequestStream:
    stream = RequestStream("0", [1, 2, 3], SamplingParams(max_new_tokens=8), text=OutputText(state.tokenizer))
    stream.admitted = True
    return stream


def give(stream: RequestStream, tokens: list[int]) -> None:
    """One step's tokens, as AsyncEngine._take hands them to the stream."""
    for token in tokens:
        stream.output.append(token)
        stream.text.add(token)
    stream._steps.append(len(stream.output))
    stream._wake.set()


def end(stream: RequestStream) -> None:
    stream.finish_reason = "length"
    stream.text.finish()
    stream._wake.set()


async def writes(make_events, steps: list[list[int]], later: list[list[int]]) -> tuple[list[list[str]], State]:
    """What ``make_events`` yields for a stream whose ``steps`` wait before it starts, then for each of
    ``later``'s steps, given one at a time, then for its end: the pieces read until the next would wait."""
    state = State()
    stream = a_stream(state)
    for tokens in steps:
        give(stream, tokens)
    events = make_events(state, stream, "cmpl-0", 0, False, True, True)

    async def ready() -> list[str]:
        out = [await events.__anext__()]
        while not stream.waits and not stream.is_finished:
            out.append(await events.__anext__())
        return out

    out = [await ready()]
    for tokens in later:
        give(stream, tokens)
        out.append(await ready())
    end(stream)
    out.append([piece async for piece in events])
    return out, state


def test_events_ready_together_go_out_as_one_write():
    ids = demo_checkpoint().tokenizer.encode("the quick brown fox jumps", add_special_tokens=False)
    steps, later = [[t] for t in ids[:3]], [[t] for t in ids[3:5]]
    batched, state = asyncio.run(writes(stream_events, steps, later))
    single, _ = asyncio.run(writes(_events, steps, later))
    assert [[piece.count("data: ") for piece in pieces] for pieces in batched] == [[3], [1], [1], [3]]
    assert [len(pieces) for pieces in single] == [3, 1, 1, 3]    # the end: its chunk, the usage, [DONE]
    assert ["".join(pieces) for pieces in batched] == ["".join(pieces) for pieces in single]
    assert batched[-1][-1].endswith("data: [DONE]\n\n") and len(state.aborted) == 1


def test_leaving_early_aborts_the_request():
    async def leave():
        state = State()
        stream = a_stream(state)
        give(stream, [5])
        events = stream_events(state, stream, "cmpl-0", 0, False, True, True)
        await events.__anext__()
        await events.aclose()
        return state, stream

    state, stream = asyncio.run(leave())
    assert state.aborted == [stream]
