"""One forward step's inputs, vLLM-style: flat and packed, no padding.

T tokens of B sequences, one after another (a prompt chunk feeds several tokens of its sequence, a
decode one); prefill chunks and decodes may share a step. Per token: ``input_ids``, ``positions`` and
``slot_mapping`` (the KV slot it writes; negative: a padding row that writes nothing). Per sequence:
``cu_seqlens_q`` (where its tokens start in T), ``seq_lens`` (its context after this step),
``block_tables`` (its KV blocks, padded to the width M) and ``last_index`` (its last token in T, the
one whose logits are sampled). The kernels' contract (``anydev.plugin_api.kernels``) fixes the dtypes:
int64 for ids, positions, slots and indices, int32 for cu_seqlens, seq lens and block tables.

A token the previous step sampled may not have reached the host yet when this step is built (the
engine overlaps building step N+1 with running step N). Such a token is taken on the device: with
``num_prev`` P > 0, the step's bytes follow P int64 slots holding the previous step's sampled tokens
(row by row), and ``token_src[t]`` indexes ``[previous tokens | input_ids]``: ``P + t`` for a token
the host knows, the row of the previous step for one it does not.

Every field lives in ONE byte tensor (``packed``), so moving a step to a device is one copy, and a
decode graph's inputs are views of one persistent device buffer that each step is copied into.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import torch

#: (name, dtype, shape in terms of T, B, M); the int64 fields first, so every field stays aligned, and
#: the per-token fields first, so where they lie depends on T only (piecewise graphs read them).
_LAYOUT = (
    ("input_ids", np.int64, lambda T, B, M: (T,)),
    ("positions", np.int64, lambda T, B, M: (T,)),
    ("slot_mapping", np.int64, lambda T, B, M: (T,)),
    ("token_src", np.int64, lambda T, B, M: (T,)),
    ("last_index", np.int64, lambda T, B, M: (B,)),
    ("cu_seqlens_q", np.int32, lambda T, B, M: (B + 1,)),
    ("seq_lens", np.int32, lambda T, B, M: (B,)),
    ("block_tables", np.int32, lambda T, B, M: (B, M)),
)
_TORCH = {np.int64: torch.int64, np.int32: torch.int32}
_FIELD_NAMES = frozenset(name for name, _, _ in _LAYOUT)


@functools.lru_cache(maxsize=256)
def _fields(T: int, B: int, M: int) -> tuple[tuple, int]:
    """((name, torch dtype, byte offset, bytes, shape) of each field, total bytes) for a step shape."""
    fields, offset = [], 0
    for name, dt, shape_of in _LAYOUT:
        shape = shape_of(T, B, M)
        nbytes = np.dtype(dt).itemsize * math.prod(shape)
        fields.append((name, _TORCH[dt], offset, nbytes, shape))
        offset += nbytes
    return tuple(fields), offset


def packed_nbytes(T: int, B: int, M: int) -> int:
    """Bytes of a packed step of T tokens, B sequences and block tables M wide."""
    return _fields(T, B, M)[1]


@dataclass
class StepBatch:
    """A packed step; the fields named in the module docstring are views of ``packed``.

    ``max_q_len`` (host int) is the most tokens one sequence feeds: 1 makes it a pure decode step.
    ``num_decodes`` (host int): the first ``num_decodes`` sequences feed one token each (the scheduler
    puts a mixed step's decodes first), so their attention runs as decode attention; the prefill
    attention then covers only the rows after them (as vLLM splits a batch's decodes from its prefills).
    ``real_rows`` is set on a decode step padded to a graph's batch size: only its first
    ``real_rows`` rows are sequences (see :mod:`anydev.core.rank.graphs`). ``real_tokens`` is set on a
    step padded to a token bucket of the piecewise graphs: only its first ``real_tokens`` tokens
    belong to sequences (the others write no KV). ``num_prev`` is the P of the
    module docstring; ``token_pool`` is ``[previous tokens | input_ids]`` once the step sits in a
    device buffer after them (:meth:`placed`), else None (and ``token_src`` is unused).
    """

    packed: torch.Tensor     # [packed_nbytes(T, B, M)] uint8
    T: int
    B: int
    M: int
    max_q_len: int
    real_rows: int | None = None
    num_prev: int = 0
    token_pool: torch.Tensor | None = None
    real_tokens: int | None = None
    num_decodes: int = 0

    @classmethod
    def pack(cls, fields: dict[str, np.ndarray], max_q_len: int, num_prev: int = 0,
             num_decodes: int = 0) -> "StepBatch":
        """Pack ``fields`` (numpy arrays by name); ``token_src`` defaults to every token the host's own."""
        T, (B, M) = len(fields["input_ids"]), fields["block_tables"].shape
        if "token_src" not in fields:
            fields = {**fields, "token_src": np.arange(num_prev, num_prev + T)}
        parts = [np.ascontiguousarray(fields[name], dtype=dt).view(np.uint8).ravel() for name, dt, _ in _LAYOUT]
        return cls(torch.from_numpy(np.concatenate(parts)), T, B, M, max_q_len, num_prev=num_prev,
                   num_decodes=num_decodes)

    def __post_init__(self):
        size = _fields(self.T, self.B, self.M)[1]
        if size != self.packed.numel():
            raise ValueError(f"packed step holds {self.packed.numel()} bytes, its shapes need {size}")

    def __getattr__(self, name: str):
        """A field's view of ``packed``, made when first read and kept: a step is packed, copied and
        placed several times, and most of those copies are never read field by field (two torch
        views a field cost about 5 us on the host)."""
        if name not in _FIELD_NAMES:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        for field, dtype, offset, nbytes, shape in _fields(self.T, self.B, self.M)[0]:
            if field == name:
                view = self.packed[offset:offset + nbytes].view(dtype).view(shape)
                setattr(self, name, view)      # found in the instance from now on: no second call
                return view

    def to(self, device) -> "StepBatch":
        """This step on ``device``: one copy of ``packed``."""
        return self.view_of(self.packed.to(device, non_blocking=True))

    def view_of(self, packed: torch.Tensor) -> "StepBatch":
        """The same step shape over other bytes (a device copy, a graph's static buffer)."""
        return StepBatch(packed[:self.packed.numel()], self.T, self.B, self.M, self.max_q_len, self.real_rows,
                         self.num_prev, real_tokens=self.real_tokens, num_decodes=self.num_decodes)

    def placed(self, buffer: torch.Tensor) -> "StepBatch":
        """The same step shape in a uint8 ``buffer`` that starts with the ``num_prev`` int64 slots of
        the previous step's tokens (views only: nothing is copied)."""
        start = 8 * self.num_prev
        step = self.view_of(buffer[start:start + self.packed.numel()])
        step.token_pool = buffer[:start + 8 * self.T].view(torch.int64)
        return step

    def embedding_ids(self) -> torch.Tensor:
        """The token ids to embed: ``input_ids``, with the previous step's tokens taken on the device.
        A previous token that is a failure code (negative: that row's request ends once the host
        reads it) is embedded as token 0; the clamp is inside the decode graph, free on the host."""
        if self.token_pool is None:
            return self.input_ids
        return self.token_pool.index_select(0, self.token_src).clamp_(min=0)

    @functools.cached_property
    def decode_rows(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(``block_tables``, ``seq_lens``) of the leading ``num_decodes`` sequences, as the decode
        attention takes them: views, made once a step (every layer reuses them)."""
        d = self.num_decodes
        return self.block_tables[:d], self.seq_lens[:d]

    @functools.cached_property
    def prefill_rows(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(``cu_seqlens_q`` counted from 0, ``seq_lens``, ``block_tables``) of the sequences after the
        ``num_decodes`` decodes, as the prefill attention takes them: made once a step, so a mixed step
        offsets ``cu_seqlens_q`` by one device op, not one per layer."""
        d = self.num_decodes
        cu_seqlens_q = self.cu_seqlens_q[d:] - d if d else self.cu_seqlens_q
        return cu_seqlens_q, self.seq_lens[d:], self.block_tables[d:]

    @property
    def num_tokens(self) -> int:
        """Tokens of real sequences (padding rows or tokens of a graph step left out)."""
        if self.real_rows is not None:
            return self.real_rows
        return self.T if self.real_tokens is None else self.real_tokens

    @property
    def is_decode(self) -> bool:
        """One new token per sequence: every query is its sequence's last position."""
        return self.max_q_len == 1


def pad_decode(batch: StepBatch, rows: int, width: int) -> StepBatch:
    """The decode step ``batch`` padded to ``rows`` sequences and block tables ``width`` wide.

    Padding rows feed token 0 at position 0, write no KV (slot -1) and attend nothing
    (``seq_lens`` 0: the attention kernels give zeros for them). ``real_rows`` says how many rows
    are real."""
    if not batch.is_decode or batch.B > rows or batch.M > width:
        raise ValueError(f"a decode step of {batch.B} rows x {batch.M} blocks does not fit a graph of "
                         f"{rows} rows x {width} blocks")
    B = batch.B

    def column(field: torch.Tensor, fill: int, dtype) -> np.ndarray:
        out = np.full(rows, fill, dtype=dtype)
        out[:B] = field.numpy()
        return out

    tables = np.zeros((rows, width), dtype=np.int32)
    tables[:B, :batch.M] = batch.block_tables.numpy()
    padded = StepBatch.pack(dict(
        input_ids=column(batch.input_ids, 0, np.int64), positions=column(batch.positions, 0, np.int64),
        token_src=np.concatenate((batch.token_src.numpy(), np.arange(batch.num_prev + B, batch.num_prev + rows))),
        slot_mapping=column(batch.slot_mapping, -1, np.int64), last_index=np.arange(rows),
        cu_seqlens_q=np.arange(rows + 1), seq_lens=column(batch.seq_lens, 0, np.int32), block_tables=tables,
    ), max_q_len=1, num_prev=batch.num_prev)
    padded.real_rows = B
    return padded
