"""What crosses between the front ends and the engine core (over ZMQ), as msgspec structs.

Front end -> engine core: :class:`AddRequest`, :class:`AbortRequests`, :class:`Shutdown`.
Engine core -> front end: :class:`EngineOutputs` (each request's new token ids and finish reason
since the last message, and the core's counters; also the heartbeat, empty, when there is no news),
:class:`EngineFailure` (the core is going down).

Why msgspec (not pickle, JSON or plain msgpack): it encodes and decodes typed structs to MessagePack
several times faster than pickle or ``msgpack`` + hand-made dicts, validates what it decodes against
the declared types (a malformed message is an error, not a half-built object), takes the engine's own
:class:`SamplingParams` dataclass as a field type, and executes nothing while decoding (pickle would
run whatever a peer sends). One tagged union per direction lets a socket carry several kinds.
"""
from __future__ import annotations

import msgspec
import tokenizers

from anydev.core.loading.tokenizer import Tokenizer
from anydev.core.sched.token_logprobs import TokenLogprobs
from anydev.core.sched.sampling_params import SamplingParams


# ---- front end -> engine core ------------------------------------------------------------------
class AddRequest(msgspec.Struct, tag=True):
    """Run ``prompt_ids``. ``max_waiting``: refuse it (``queue_full``) when that many requests
    already wait for admission; ``timeout``: end it with finish reason "timeout" after that many
    seconds. Stop strings are the front end's: ``sampling.stop`` is empty here."""

    request_id: str
    prompt_ids: list[int]
    sampling: SamplingParams
    max_waiting: int | None = None
    timeout: float | None = None


class AbortRequests(msgspec.Struct, tag=True):
    """End these requests now (their KV blocks come back); unknown or finished ids are ignored."""

    request_ids: list[str]
    reason: str = "abort"


class Shutdown(msgspec.Struct, tag=True):
    """This front end is done: the engine core aborts what it still runs for it; once no front end
    is left, the core prints its final counters and exits."""


ToCore = AddRequest | AbortRequests | Shutdown


# ---- engine core -> front end ------------------------------------------------------------------
class RequestOutput(msgspec.Struct, array_like=True):
    """A request's news: ``new_token_ids`` since its last output; ``finish_reason`` once it is done
    ("eos", "length", "stop", "abort", "timeout"); ``error`` when it was refused at once, with
    ``error_kind`` "queue_full" (retry later) or "invalid" (the request cannot run), or when it failed
    while running, with ``error_kind`` "failed" (its sampling failed; the engine goes on). An output
    with none of these is the acknowledgement that the request was admitted to the queue.
    ``new_logprobs``: with ``SamplingParams.logprobs``, one per new token; ``prompt_logprobs``: with
    ``SamplingParams.prompt_logprobs``, one per prompt token after the first, in the first output."""

    request_id: str
    new_token_ids: list[int]
    finish_reason: str | None = None
    error: str | None = None
    error_kind: str | None = None
    new_logprobs: list[TokenLogprobs] | None = None
    prompt_logprobs: list[TokenLogprobs] | None = None   # with the first tokens, when the request scores its prompt


class EngineStats(msgspec.Struct):
    """The engine core's counters when it sent them (the server's gauges)."""

    running: int = 0
    waiting: int = 0
    kv_blocks_used: int = 0
    kv_blocks_total: int = 0
    prefix_cache_blocks: int = 0
    prefix_cache_hit_rate: float = 0.0
    prefix_cache_queried_tokens: int = 0
    prefix_cache_hit_tokens: int = 0
    preemptions: int = 0
    prefill_steps: int = 0
    prefill_tokens: int = 0
    prefill_seconds: float = 0.0
    decode_steps: int = 0
    decode_tokens: int = 0
    decode_seconds: float = 0.0


class EngineOutputs(msgspec.Struct, tag=True):
    """One batch for one front end: every output since the last batch, then the counters. The core
    sends one at least every ``engine_core.HEARTBEAT_S`` seconds from its step loop, with no outputs
    when there is no news: a front end that hears nothing for longer knows the loop is not running.

    Most of a step's news is one token for a request that goes on and asked for no logprobs: those
    come as ``plain_ids[i]`` (a request) and ``plain_tokens[i]`` (its new token), two flat lists
    instead of an output each, which the core builds and both ends encode and decode for a fraction
    of the cost. They are taken before ``outputs``; a plain token may precede its request's
    admission in ``outputs`` (the token admits it)."""

    outputs: list[RequestOutput]
    stats: EngineStats
    plain_ids: list[str] = []
    plain_tokens: list[int] = []


class EngineFailure(msgspec.Struct, tag=True):
    """The engine core failed (a step raised) and exits; every request in flight is lost."""

    message: str


FromCore = EngineOutputs | EngineFailure


class TokenizerSpec(msgspec.Struct):
    """The model's tokenizer as the engine core opened it: its ``tokenizer.json`` text and the rest
    of :class:`~anydev.core.loading.tokenizer.Tokenizer`'s fields, so that a front end rebuilds the
    same tokenizer without opening the checkpoint (which loads torch)."""

    backend_json: str
    chat_template: str | None
    special_tokens: dict[str, str]
    bos_token_id: int | None
    eos_token_ids: list[int]

    @classmethod
    def of(cls, tokenizer: Tokenizer) -> TokenizerSpec:
        return cls(tokenizer.backend.to_str(), tokenizer.chat_template, dict(tokenizer.special_tokens),
                   tokenizer.bos_token_id, list(tokenizer.eos_token_ids))

    def build(self) -> Tokenizer:
        backend = tokenizers.Tokenizer.from_str(self.backend_json)
        return Tokenizer(backend, chat_template=self.chat_template, special_tokens=self.special_tokens,
                         bos_token_id=self.bos_token_id, eos_token_ids=self.eos_token_ids)


class EngineInfo(msgspec.Struct):
    """What the engine core says once its engine is up (the front ends' limits, banner and tokenizer)."""

    max_model_len: int
    vocab_size: int
    num_blocks: int
    block_size: int
    device: str
    tokenizer: TokenizerSpec
    weights: list[str] = []     # per rank: the weights' formats and device bytes
    startup: dict[str, float] = {}   # the core process's start-up phases in seconds (process_timeline's names)


ENCODER = msgspec.msgpack.Encoder()
TO_CORE = msgspec.msgpack.Decoder(ToCore)
FROM_CORE = msgspec.msgpack.Decoder(FromCore)
