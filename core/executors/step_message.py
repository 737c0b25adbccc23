"""Rank 0's messages to the other rank processes, as bytes: steps without pickle, the rest pickled.

A message is the tuple ``(seq, wants_reply, target, kind, *rest)`` of :mod:`anydev.core.executor`.
A step (``("call", "forward" | "forward_stage", args, None)``), sent every few milliseconds, travels
as ``b"S"``, the msgpack of :class:`StepHeader` (the control fields, with each packed
:class:`~anydev.core.models.batch.StepBatch`'s shape) and the batches' packed bytes as they are
(each padded to 8 bytes, so that its int64 fields stay aligned).
Every other message (setup, init, close, reads) is ``b"P"`` and a pickle, in which tensors travel as
their raw bytes. :func:`encode` gives the parts to send one after another (no join), :func:`decode`
takes them back from one buffer, whose memory the decoded batches then share.
"""
from __future__ import annotations

import io
import pickle
import struct

import msgspec
import torch

from ..models.batch import StepBatch, packed_nbytes
from ..sched.sampling import SamplingParams

STEP, PICKLED = b"S", b"P"
STEP_CALLS = ("forward", "forward_stage")
_LENGTH = struct.Struct("<I")


class BatchShape(msgspec.Struct, array_like=True):
    """What a packed step's bytes need besides themselves (see :class:`StepBatch`)."""

    T: int
    B: int
    M: int
    max_q_len: int
    real_rows: int | None
    num_prev: int
    real_tokens: int | None
    num_decodes: int


class StepHeader(msgspec.Struct, array_like=True):
    """A step message's control fields: per batch, its shape, sampling parameters and seeds (``forward``
    has one batch, ``forward_stage`` its micro-batches)."""

    seq: int
    wants_reply: bool
    target: int | None
    name: str
    batches: list[BatchShape]
    sampling: list[list[SamplingParams | None]]
    seeds: list[list[tuple[int, int] | None]]
    share_tokens: bool
    ended: tuple[int, ...]


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(StepHeader)


def encode(message: tuple) -> list:
    """The bytes-like parts of ``message`` (see the module docstring), to send one after another."""
    header = _step_header(message)
    if header is None:
        return [PICKLED, dumps(message)]
    head = _encoder.encode(header)
    parts = [STEP, _LENGTH.pack(len(head)), head, _pad(1 + _LENGTH.size + len(head))]
    for batch in message[5][0] if header.name == "forward_stage" else [message[5][0]]:
        parts += [batch.packed.cpu().numpy(), _pad(batch.packed.numel())]
    return parts


def decode(data: bytearray) -> tuple:
    """The message of ``encode``'s parts, joined in ``data``; its batches are views of ``data``."""
    kind = bytes(data[:1])
    if kind == PICKLED:
        return pickle.loads(memoryview(data)[1:])
    if kind != STEP:
        raise ValueError(f"a control message starts with {STEP!r} or {PICKLED!r}, not {kind!r}")
    (length,) = _LENGTH.unpack_from(data, 1)
    at = 1 + _LENGTH.size
    h = _decoder.decode(memoryview(data)[at:at + length])
    at += length + len(_pad(at + length))
    payload = torch.frombuffer(data, dtype=torch.uint8)
    batches = []
    for s in h.batches:
        nbytes = packed_nbytes(s.T, s.B, s.M)
        batches.append(StepBatch(payload[at:at + nbytes], s.T, s.B, s.M, s.max_q_len, s.real_rows, s.num_prev,
                                 real_tokens=s.real_tokens, num_decodes=s.num_decodes))
        at += nbytes + len(_pad(nbytes))
    if h.name == "forward":
        args = (batches[0], h.sampling[0], h.seeds[0], h.share_tokens, None, h.ended)
    else:
        args = (batches, h.sampling, h.seeds, h.ended)
    return (h.seq, h.wants_reply, h.target, "call", h.name, args, None)


def _pad(nbytes: int) -> bytes:
    """Zeros that bring ``nbytes`` to a multiple of 8: each batch starts aligned for its int64 fields."""
    return bytes(-nbytes % 8)


def _step_header(message: tuple) -> StepHeader | None:
    """The header of a step message, or None for a message of another kind (pickled)."""
    if len(message) != 7 or message[3] != "call" or message[4] not in STEP_CALLS or message[6] is not None:
        return None
    seq, wants_reply, target, _, name, args, _ = message
    if name == "forward":
        batch, sampling, seeds, share, read, ended = args
        if read is not None:   # a token ticket: only rank 0's own step reads one
            return None
        batches, sampling, seeds = [batch], [sampling], [seeds]
    else:
        batches, sampling, seeds, ended = args
        share = False
    if any(b.token_pool is not None for b in batches):
        return None
    return StepHeader(seq, wants_reply, target, name,
                      [BatchShape(b.T, b.B, b.M, b.max_q_len, b.real_rows, b.num_prev, b.real_tokens, b.num_decodes)
                       for b in batches],
                      [list(p) for p in sampling], [list(k) for k in seeds], share, tuple(ended))


# ---- pickled messages (and replies): tensors as raw bytes -------------------------------------------
class _Pickler(pickle.Pickler):
    """Tensors travel as plain bytes."""

    def reducer_override(self, obj):
        if isinstance(obj, torch.Tensor):
            host = obj.detach().cpu().contiguous()
            return _tensor, (host.reshape(-1).view(torch.uint8).numpy().tobytes() if host.numel() else b"",
                             host.dtype, tuple(host.shape))
        return NotImplemented


def dumps(value) -> bytes:
    """``value`` pickled, its tensors as their raw bytes."""
    buffer = io.BytesIO()
    _Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(value)
    return buffer.getvalue()


def _tensor(data: bytes, dtype: torch.dtype, shape: tuple) -> torch.Tensor:
    if not data:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).view(dtype).view(shape)
