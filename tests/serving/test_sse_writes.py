"""A streamed answer's events go out together when they are ready together (the front end fell behind
the engine), and the body they make is the same as event by event."""
from __future__ import annotations

import asyncio
import json

from anydev.core import SamplingParams
from anydev.core.loading.checkpoint import demo_checkpoint
from anydev.core.output import OutputText
from anydev.serving.async_engine import FailedRequestError, RequestStream
from anydev.serving.sse import Choice, _events, stream_events


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
    events = make_events(state, stream)

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


def whole_stream(state, stream):
    """A streamed answer of one choice, usage in every chunk and at the end."""
    return stream_events(state, [Choice(0, stream)], "cmpl-0", 0, False, True, True)


def one_choice(state, stream):
    """The same choice's events one at a time, up to its finish reason."""
    return _events(state, Choice(0, stream), "cmpl-0", 0, False, True, True)


def test_events_ready_together_go_out_as_one_write():
    ids = demo_checkpoint().tokenizer.encode("the quick brown fox jumps", add_special_tokens=False)
    steps, later = [[t] for t in ids[:3]], [[t] for t in ids[3:5]]
    batched, state = asyncio.run(writes(whole_stream, steps, later))
    single, _ = asyncio.run(writes(one_choice, steps, later))
    assert [[piece.count("data: ") for piece in pieces] for pieces in batched] == [[3], [1], [1], [3]]
    assert [len(pieces) for pieces in single] == [3, 1, 1, 1]    # the end: its chunk (then the usage, [DONE])
    assert ["".join(pieces) for pieces in batched[:-1]] == ["".join(pieces) for pieces in single[:-1]]
    assert batched[-1][0].startswith(single[-1][0]) and batched[-1][0].endswith("data: [DONE]\n\n")
    assert len(state.aborted) == 1


def test_leaving_early_aborts_the_request():
    async def leave():
        state = State()
        stream = a_stream(state)
        give(stream, [5])
        events = whole_stream(state, stream)
        await events.__anext__()
        await events.aclose()
        return state, stream

    state, stream = asyncio.run(leave())
    assert state.aborted == [stream]


def test_several_choices_interleave_by_index_and_end_once_every_one_has():
    async def run():
        state = State()
        first, second = a_stream(state), a_stream(state)
        events = stream_events(state, [Choice(0, first), Choice(1, second)], "cmpl-0", 0, False, True, False)
        give(second, [5])
        got = [await events.__anext__()]
        end(second)
        give(first, [6])
        got.append(await events.__anext__())
        end(first)
        got += [piece async for piece in events]
        return state, [first, second], "".join(got)

    state, streams, body = asyncio.run(run())
    chunks = [json.loads(line[6:]) for line in body.split("\n\n") if line.startswith("data: {")]
    ends = [(c["choices"][0]["index"], c["choices"][0]["finish_reason"]) for c in chunks if c["choices"]]
    assert (1, "length") in ends and (0, "length") in ends
    assert ends.index((1, "length")) < ends.index((0, "length"))     # as they came: the second ended first
    assert body.count("data: [DONE]") == 1 and body.endswith("data: [DONE]\n\n")
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == {"prompt_tokens": 3, "completion_tokens": 2,
                                                                   "total_tokens": 5}   # one prompt, counted once
    assert sorted(map(id, state.aborted)) == sorted(map(id, streams))


def test_an_error_in_one_choice_ends_the_answer_and_aborts_every_choice():
    async def run():
        state = State()
        first, second = a_stream(state), a_stream(state)
        events = stream_events(state, [Choice(0, first), Choice(1, second)], "cmpl-0", 0, False, False, False)
        second.error = FailedRequestError("its logits hold NaN")
        second._wake.set()
        body = "".join([piece async for piece in events])
        return state, [first, second], body

    state, streams, body = asyncio.run(run())
    error = json.loads(body.split("\n\n")[-3][6:])
    assert error["error"]["code"] == "request_failed" and body.endswith("data: [DONE]\n\n")
    assert sorted(map(id, state.aborted)) == sorted(map(id, streams))


def test_leaving_several_choices_early_aborts_each_request():
    async def leave():
        state = State()
        streams = [a_stream(state) for _ in range(3)]
        give(streams[2], [5])
        events = stream_events(state, [Choice(i, s) for i, s in enumerate(streams)], "cmpl-0", 0, False, True, True)
        await events.__anext__()
        await events.aclose()
        return state, streams

    state, streams = asyncio.run(leave())
    assert sorted(map(id, state.aborted)) == sorted(map(id, streams))
