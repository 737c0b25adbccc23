"""Reading a GGUF file (llama.cpp's format): weights in HF layout, config and tokenizer from metadata.

Weights: every tensor type the ``gguf`` package can dequantize; F32/F16/BF16 keep their dtype,
quantized types come back as float32, or, for the block formats ``quantized_linear`` reads
(:data:`anydev.plugin_api.weight_formats.BLOCK_FORMATS`), as their stored bytes (``blocks=True``). llama.cpp's converter permutes the rows of q_proj/k_proj for
its rotary layout (llama architecture only); we undo that, so tensors equal HF's.
"""
from __future__ import annotations

import math
import re
import struct
from pathlib import Path

import numpy as np
import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFEndian, GGUFReader, GGUFValueType, ReaderField
from gguf.quants import dequantize

from anydev.plugin_api.weight_formats import BLOCK_FORMATS

from .checkpoint_errors import ModelLoadError
from .gguf_checks import check_tensor_layout, tensor_table_problem
from ..config import ModelConfig, check_attention, normalize_rope_scaling, positive_number, shape_int
from ..models.family import GGUF_GLOBAL_NAMES, LLAMA_GGUF_LAYER_NAMES
from ..models.registry import model_registry
from .gguf_tokenizer import gguf_tokenizer
from .tensor_slices import sliced_shape
from .tokenizer import Tokenizer

# The GGUF architectures read, and the family each becomes, are the model registry's
# (ModelFamily.gguf_architectures; mistral GGUFs say "llama"); so are the per-layer names.
_GLOBAL_NAMES = GGUF_GLOBAL_NAMES
_STORED_DTYPES = {GGMLQuantizationType.F32: torch.float32, GGMLQuantizationType.F16: torch.float16,
                  GGMLQuantizationType.BF16: torch.bfloat16}
_LAYER_TENSOR = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)")
ROPE_FREQS = "rope_freqs.weight"
#: A family's GGUF name for stacked experts maps to ``model.layers.<i>.mlp.experts.<proj>.weight``; expert
#: ``e`` of it is read as ``model.layers.<i>.mlp.experts.<e>.<proj>.weight`` (HF's per-expert names).
EXPERTS = ".mlp.experts."   # llama3 rope scaling, stored by llama.cpp as per-frequency factors


def hf_name(gguf_name: str, layer_names=LLAMA_GGUF_LAYER_NAMES) -> str | None:
    """The HF name of a GGUF tensor name, or None when it has none (``layer_names``: a family's
    :attr:`~anydev.core.models.family.ModelFamily.gguf_layer_names`)."""
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    match = _LAYER_TENSOR.fullmatch(gguf_name)
    if match and match.group(2) in layer_names:
        layer, part, kind = match.groups()
        return f"model.layers.{layer}.{layer_names[part]}.{kind}"
    return None


def gguf_name(hf: str, layer_names=LLAMA_GGUF_LAYER_NAMES) -> str:
    """The GGUF name of an HF tensor name (the inverse of :func:`hf_name`)."""
    for gguf_global, hf_global in _GLOBAL_NAMES.items():
        if hf == hf_global:
            return gguf_global
    _, _, layer, rest = hf.split(".", 3)
    part, kind = rest.rsplit(".", 1)
    parts = {hf_part: g for g, hf_part in layer_names.items()}
    return f"blk.{layer}.{parts[part]}.{kind}"


def unpermute_rows(rows: torch.Tensor, n_head: int) -> torch.Tensor:
    """Undo llama.cpp's ``permute`` of q/k rows (per head: interleaved pairs → two halves)."""
    head_dim = rows.shape[0] // n_head
    return rows.reshape(n_head, head_dim // 2, 2, *rows.shape[1:]).transpose(1, 2).reshape(rows.shape)


_NEEDED_ARRAYS = {"tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.scores",
                  "tokenizer.ggml.token_type"}


def read_metadata(reader: GGUFReader) -> dict:
    """Metadata fields as Python values; of the array fields only the tokenizer's (others, e.g. per-layer
    lists, are skipped: we do not use them and they can be large)."""
    values = {}
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or not field.types:
            continue
        if field.types[0] != GGUFValueType.ARRAY or name in _NEEDED_ARRAYS:
            values[name] = field.contents()
    return values


class _Truncated(Exception):
    def __init__(self, needed: int, what: str = "its contents"):
        self.needed, self.what = needed, what


class _Damaged(Exception):
    pass


class _BoundedReader(GGUFReader):
    """A GGUFReader that says so when a read runs past the end of the file (where the stock one
    fails later with an unrelated numpy error), naming the tensor when it is a tensor's data."""

    def _build_tensors(self, start_offs, fields):
        problem = tensor_table_problem(start_offs, fields, len(self.data))
        if problem is not None:
            if problem.cut_at is not None:
                raise _Truncated(problem.cut_at, f"tensor {problem.tensor}'s data")
            raise _Damaged(problem.message)
        return super()._build_tensors(start_offs, fields)

    def _get(self, offset, dtype, count=1, override_order=None):
        end = int(offset) + np.dtype(dtype).itemsize * int(count)
        if end > len(self.data):
            raise _Truncated(end)
        return super()._get(offset, dtype, count, override_order)

    def _get_field_parts(self, orig_offs, raw_type):
        """The stock reader's parts, but an array of scalars as one part (``data`` one index, of the
        whole array), and an array of strings as one :class:`_DecodedStrings` part, decoded during a walk
        over their lengths: the stock reader makes two numpy views per item through ``_get`` (some 25 s
        for Llama-3's 128k tokens and 280k merges on a busy 2-core host), then ``contents()`` decodes
        each. ``contents()`` gives the same values."""
        if GGUFValueType(raw_type) != GGUFValueType.ARRAY:
            return super()._get_field_parts(orig_offs, raw_type)
        raw_itype, count = self._get(orig_offs, np.uint32), self._get(orig_offs + 4, np.uint64)
        item_type = GGUFValueType(int(raw_itype[0]))
        types = [GGUFValueType.ARRAY, item_type]
        if item_type == GGUFValueType.STRING:
            end, strings = self._strings(orig_offs + 12, int(count[0]))
            return end - orig_offs, [raw_itype, count, strings], [2], types
        scalar = self.gguf_scalar_to_np.get(item_type)
        if scalar is None:    # nested arrays: the stock reader's way
            return super()._get_field_parts(orig_offs, raw_type)
        values = self._get(orig_offs + 12, scalar, int(count[0]))
        return 12 + int(values.nbytes), [raw_itype, count, values], [2], types

    def _push_field(self, field: ReaderField, skip_sum: bool = False) -> int:
        if field.types == [GGUFValueType.ARRAY, GGUFValueType.STRING] and isinstance(field.parts[-1], _DecodedStrings):
            field = _StringArrayField(*field)
        return super()._push_field(field, skip_sum)

    def _strings(self, offset: int, count: int) -> tuple[int, _DecodedStrings]:
        """The end of ``count`` GGUF strings (a uint64 length, then UTF-8 bytes) from ``offset``, and the
        strings, decoded."""
        length_of = struct.Struct(">Q" if self.endianess == GGUFEndian.BIG else "<Q").unpack_from
        size, file = len(self.data), memoryview(self.data.view(np.ndarray)).cast("B")   # (slicing a memmap costs far more)
        start, strings = offset, []
        append = strings.append
        for _ in range(count):
            if offset + 8 > size:
                raise _Truncated(offset + 8)
            end = offset + 8 + length_of(file, offset)[0]
            if end > size:
                raise _Truncated(end)
            append(str(file[offset + 8:end], "utf-8"))
            offset = end
        return offset, _DecodedStrings(strings, offset - start)


class _DecodedStrings(list):
    """A string array's values, decoded; ``nbytes`` is the size they take in the file (lengths included),
    as a numpy part's would be."""

    def __init__(self, strings: list[str], nbytes: int):
        super().__init__(strings)
        self.nbytes = nbytes


class _StringArrayField(ReaderField):
    """A string array field whose one data part is its :class:`_DecodedStrings`."""
    __slots__ = ()

    def contents(self, index_or_slice: int | slice = slice(None)):
        strings = self.parts[self.data[0]]
        return strings[index_or_slice] if isinstance(index_or_slice, int) else list(strings[index_or_slice])


def _open_reader(path: Path) -> GGUFReader:
    try:
        return _BoundedReader(path)
    except _Damaged as damage:
        raise ModelLoadError(f"{path}: {damage}; the file is damaged (or truncated)") from None
    except _Truncated as cut:
        raise ModelLoadError(f"{path}: truncated GGUF file: it has {path.stat().st_size} bytes, but {cut.what} "
                             f"runs to byte {cut.needed} at least; copy or download it again") from None
    except (ValueError, IndexError, KeyError, OverflowError, UnicodeDecodeError, OSError) as err:
        raise ModelLoadError(f"{path}: corrupt GGUF header ({err})") from err


class GGUFStore:
    """The tensors of an open GGUF file under HF names, decoded on ``load`` (thread-safe: reads only)."""

    def __init__(self, reader: GGUFReader, path: Path, permuted_heads: dict[str, int],
                 layer_names=LLAMA_GGUF_LAYER_NAMES):
        self._reader = reader
        self._path = path
        self._tensors, self._experts = {}, {}
        for tensor in reader.tensors:
            name = hf_name(tensor.name, layer_names)
            if name is None:
                continue
            if len(tensor.shape) == 3 and EXPERTS in name:   # llama.cpp stacks a layer's experts in one tensor
                for e in range(int(tensor.shape[2])):
                    self._tensors[name.replace(EXPERTS, f"{EXPERTS}{e}.")] = tensor
                    self._experts[name.replace(EXPERTS, f"{EXPERTS}{e}.")] = e
            else:
                self._tensors[name] = tensor
        # HF name → head count to un-permute its rows with (q/k of the llama architecture).
        self._permuted_heads = permuted_heads

    def names(self) -> list[str]:
        return list(self._tensors)

    def load(self, name: str) -> torch.Tensor:
        piece = self.tensor_slice(name, None)
        out = torch.empty(piece.shape, dtype=piece.dtype)
        piece.read_rows(0, piece.shape[0], out.view(-1).view(torch.uint8).numpy())
        return out

    def tensor_slice(self, name: str, cut, blocks: bool = False) -> GGUFSlice:
        if self._reader is None:
            raise ModelLoadError(f"{self._path}: the checkpoint is closed")
        return GGUFSlice(self._tensors[name], cut, self._permuted_heads.get(name), self._path, blocks,
                         self._experts.get(name))

    def block_format(self, name: str) -> str | None:
        """The block format (a name of ``BLOCK_FORMATS``) of 2-D tensor ``name``, or None."""
        tensor = self._tensors[name]
        fmt = tensor.tensor_type.name.lower()
        return fmt if fmt in BLOCK_FORMATS and (len(tensor.shape) == 2 or name in self._experts) else None

    def stored_format(self, name: str, cut) -> str | None:
        """The block format (a name of ``BLOCK_FORMATS``) tensor ``name`` is stored in, when its part
        ``cut`` is whole rows of whole blocks (what ``quantized_linear`` reads as stored); else None."""
        fmt = self.block_format(name)
        if fmt is None:
            return None
        elems = BLOCK_FORMATS[fmt].elems
        if cut is not None and cut[0] == 1 and (cut[1] % elems or cut[2] % elems):
            return None
        return fmt

    def close(self) -> None:
        self._reader = None   # drops the memory map once no loaded tensor refers to it
        self._tensors = {}


class GGUFSlice:
    """The part ``cut`` of a GGUF tensor in HF layout (see :mod:`.tensor_slices`), decoded a block of
    rows at a time from the bytes of those rows only: along a row, only the quantization blocks the
    cut covers (a cut that splits a block decodes whole rows, then narrows). Quantized types are
    dequantized on the host, per block, by the thread that reads it (the engine's loader reads the
    block formats as stored instead: ``blocks``); F32/F16/BF16 keep their dtype.
    ``permuted_heads``: undo llama.cpp's q/k row permutation over that many heads. ``blocks``: rows of
    stored bytes instead (dtype uint8, ``row_bytes`` bytes a row): the cut's blocks, or, where the cut
    splits blocks along a row, the blocks that cover it; then ``covered`` is ``(offset, values)``: a
    decoded row has ``values`` values, and the cut's are ``shape[1]`` of them from ``offset``.
    ``expert``: the tensor stacks experts ``[E, rows, cols]``; this is expert ``expert``'s ``[rows, cols]``."""

    def __init__(self, tensor, cut, permuted_heads: int | None, path: Path, blocks: bool = False,
                 expert: int | None = None):
        self.full_shape = tuple(int(n) for n in reversed(tensor.shape))   # GGUF lists dims innermost-first
        if expert is not None:
            experts, *self.full_shape = self.full_shape
            self.full_shape = tuple(self.full_shape)
        self.shape = sliced_shape(self.full_shape, cut)
        self._tensor, self._path = tensor, path
        kind = tensor.tensor_type
        self.dtype = _STORED_DTYPES.get(kind, torch.float32)
        block, block_bytes = GGML_QUANT_SIZES[kind]
        rows = self.full_shape[0] if len(self.full_shape) > 1 else 1      # a 1-D tensor is one row
        if expert is None:
            self._raw = tensor.data.view(np.uint8).reshape(rows, -1)
        else:
            self._raw = tensor.data.view(np.uint8).reshape(experts * rows, -1)[expert * rows:(expert + 1) * rows]
        self._first_row, self._columns, self._narrow, self._cut = 0, slice(None), None, cut
        if cut is not None and len(self.full_shape) > 1:
            dim, start, length = cut
            if dim == 0:
                self._first_row = start
            elif start % block == 0 and length % block == 0:   # along the row: whole blocks only
                self._columns = slice(start // block * block_bytes, (start + length) // block * block_bytes)
            else:
                self._narrow = (start, length)
        self._head_rows = self.full_shape[0] // permuted_heads if permuted_heads else None
        self.blocks = blocks
        self.covered = None
        if blocks:
            if len(self.full_shape) != 2:
                raise ModelLoadError(f"{path}: tensor '{tensor.name}' is not 2-D; it cannot be read as blocks")
            if self._narrow is not None:    # the blocks that cover the cut: decoded, then narrowed by the caller
                start, length = self._narrow
                first, end = start // block * block, -(-(start + length) // block) * block
                self._columns = slice(first // block * block_bytes, end // block * block_bytes)
                self.covered = (start - first, end - first)
            self.dtype = torch.uint8
            self.row_bytes = self._raw[:1, self._columns].shape[1]

    @property
    def head_rows(self) -> int | None:
        """Rows of one head, where the file holds them permuted (llama.cpp's q/k rotary order), else None."""
        return self._head_rows

    def read_file_rows(self, first: int, count: int, out: np.ndarray) -> None:
        """Stored rows ``[first, first + count)`` of a ``blocks`` slice in the file's order, not HF's: for
        q/k, the caller reads whole heads and un-permutes each (a head's rows ``(a, b)``, ``a < head_rows //
        2``, ``b < 2``, are HF's ``(b, a)``)."""
        if not self.blocks:
            raise ValueError("read_file_rows reads the rows of a blocks slice")
        rows = slice(self._first_row + first, self._first_row + first + count)
        out.reshape(count, self.row_bytes)[:] = self._raw[rows, self._columns]

    def _file_rows(self, first: int, count: int):
        """Rows of the file holding HF rows ``[first, first + count)`` of the slice."""
        if self._head_rows is None:
            return slice(self._first_row + first, self._first_row + first + count)
        # llama.cpp stores row (head, a, b) of HF's (head, half a, b) at (head, b, a)
        rows = self._first_row + first + np.arange(count)
        head, within = np.divmod(rows, self._head_rows)
        half, b = np.divmod(within, self._head_rows // 2)
        return head * self._head_rows + b * 2 + half

    def read_rows(self, first: int, count: int, out: np.ndarray) -> None:
        if self.blocks:
            rows = self._file_rows(first, count)
            if isinstance(rows, slice):
                out.reshape(count, self.row_bytes)[:] = self._raw[rows, self._columns]
            else:   # q/k's permuted rows, gathered straight into ``out`` (no temporary)
                np.take(self._raw[:, self._columns], rows, axis=0, out=out.reshape(count, self.row_bytes), mode="clip")
            return
        if len(self.full_shape) == 1:   # norms and biases: small, decoded whole
            decoded = decode_tensor(self._tensor, self._path)
            if self._head_rows is not None:
                decoded = unpermute_rows(decoded, self.full_shape[0] // self._head_rows)
            start = 0 if self._cut is None else self._cut[1]
            decoded = decoded[start + first:start + first + count]
        else:
            shape = (count, self.full_shape[1] if self._columns == slice(None) else self.shape[1])
            raw = self._raw[self._file_rows(first, count), self._columns]
            decoded = _decode_bytes(raw, self._tensor.tensor_type, shape, self._tensor.name, self._path)
            if self._narrow is not None:
                decoded = decoded.narrow(1, *self._narrow)
        torch.from_numpy(out).view(self.dtype).view(decoded.shape).copy_(decoded)


def decode_tensor(tensor, path: Path) -> torch.Tensor:
    """A GGUF tensor as a CPU tensor in HF shape: F32/F16/BF16 keep their dtype, every quantized type
    is dequantized to float32. The result owns its memory (no view of the file)."""
    shape = tuple(int(n) for n in reversed(tensor.shape))
    rows = shape[0] if len(shape) > 1 else 1
    return _decode_bytes(tensor.data.view(np.uint8).reshape(rows, -1), tensor.tensor_type, shape, tensor.name, path)


def _decode_bytes(raw: np.ndarray, kind, shape: tuple[int, ...], name: str, path: Path) -> torch.Tensor:
    """Decode bytes of whole rows (a view of the file) into a tensor that owns its memory."""
    if kind in (GGMLQuantizationType.F32, GGMLQuantizationType.F16, GGMLQuantizationType.BF16):
        raw = np.array(raw)    # a copy: the result must not view the file
    else:
        raw = np.ascontiguousarray(raw)
    if kind == GGMLQuantizationType.F32:
        return torch.from_numpy(raw.view(np.float32).reshape(shape))
    if kind == GGMLQuantizationType.F16:
        return torch.from_numpy(raw.view(np.float16).reshape(shape))
    if kind == GGMLQuantizationType.BF16:
        return torch.from_numpy(raw.view(np.int16).reshape(shape)).view(torch.bfloat16)
    try:
        return torch.from_numpy(dequantize(raw, kind).reshape(shape))
    except NotImplementedError as err:
        raise ModelLoadError(f"{path}: tensor '{name}' has type {kind.name}, which the gguf "
                             f"package cannot dequantize (upgrade gguf, or use another quantization)") from err


def _llama3_rope_scaling(factors: np.ndarray, theta: float, head_dim: int, source: str,
                         original_context: int | None) -> dict:
    """Recover HF's llama3 rope-scaling dict from llama.cpp's ``rope_freqs`` factors.

    llama.cpp stores one factor per rotary frequency, computed from (factor, low_freq_factor,
    high_freq_factor, original_max_position_embeddings). Every released Llama 3.x uses low=1, high=4
    and an original context of 8192, with ``factor`` = the largest stored value; we rebuild the factors
    from those and accept them only if they match, so an unknown scheme is an error, not a wrong model.
    """
    scaling = {"rope_type": "llama3", "factor": float(factors.max()), "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": original_context or 8192}
    old_context = scaling["original_max_position_embeddings"]
    low_wavelen = old_context / scaling["low_freq_factor"]
    high_wavelen = old_context / scaling["high_freq_factor"]
    expected = []
    for i in range(0, head_dim, 2):
        wavelen = 2 * math.pi * theta ** (i / head_dim)
        if wavelen < high_wavelen:
            expected.append(1.0)
        elif wavelen > low_wavelen:
            expected.append(scaling["factor"])
        else:
            smooth = (old_context / wavelen - scaling["low_freq_factor"]) / (
                scaling["high_freq_factor"] - scaling["low_freq_factor"])
            expected.append(1 / ((1 - smooth) / scaling["factor"] + smooth))
    if len(expected) != factors.size or not np.allclose(factors, expected, rtol=1e-3):
        raise ModelLoadError(f"{source}: rope_freqs does not match llama3 rope scaling; this scheme is unsupported")
    return scaling


def _rope_scaling(meta: dict, arch: str, reader: GGUFReader, theta: float, head_dim: int, source: str):
    freqs = next((t for t in reader.tensors if t.name == ROPE_FREQS), None)
    original_context = meta.get(f"{arch}.rope.scaling.original_context_length")
    if freqs is not None:
        factors = decode_tensor(freqs, Path(source)).float().numpy()
        return _llama3_rope_scaling(factors, theta, head_dim, source, original_context)
    kind = meta.get(f"{arch}.rope.scaling.type")
    if kind in (None, "none"):
        return None
    scaling = {"rope_type": kind, "factor": meta.get(f"{arch}.rope.scaling.factor")}
    if original_context:
        scaling["original_max_position_embeddings"] = original_context
    return normalize_rope_scaling(scaling, source)


def gguf_model_config(meta: dict, reader: GGUFReader, tokenizer: Tokenizer, source: str) -> ModelConfig:
    """The ModelConfig of a GGUF file: the keys every family shares here, the rest by its family."""
    gguf_arch = meta["general.architecture"]   # checked by read_gguf_file
    family = model_registry().for_gguf(gguf_arch)
    if family is None:
        raise ModelLoadError(f"{source}: unsupported GGUF architecture '{gguf_arch}'; "
                             f"supported: {', '.join(model_registry().gguf_architectures())}")

    def key(name: str, default=None):
        value = meta.get(f"{gguf_arch}.{name}", default)
        if value is None:
            raise ModelLoadError(f"{source}: GGUF metadata lacks '{gguf_arch}.{name}'")
        return value

    def size(name: str, default=None) -> int:
        return shape_int(key(name, default), f"{gguf_arch}.{name}", source)

    hidden, heads = size("embedding_length"), size("attention.head_count")
    if f"{gguf_arch}.attention.key_length" not in meta and hidden % heads:
        raise ModelLoadError(f"{source}: '{gguf_arch}.embedding_length' ({hidden}) is not a multiple of "
                             f"'{gguf_arch}.attention.head_count' ({heads})")
    head_dim = size("attention.key_length", hidden // heads)
    rope_dims = size("rope.dimension_count", head_dim)
    if rope_dims != head_dim:
        raise ModelLoadError(f"{source}: partial rotary embeddings ({rope_dims} of {head_dim} dims) are unsupported")
    theta = positive_number(key("rope.freq_base", 10000.0), f"{gguf_arch}.rope.freq_base", source)
    embedding = next((t for t in reader.tensors if t.name == "token_embd.weight"), None)
    if embedding is None:
        raise ModelLoadError(f"{source}: GGUF file has no token_embd.weight tensor")
    model = family.config_class(
        architecture=family.name,
        vocab_size=int(embedding.shape[1]),
        hidden_size=hidden,
        intermediate_size=size("feed_forward_length"),
        num_hidden_layers=size("block_count"),
        num_attention_heads=heads,
        num_key_value_heads=size("attention.head_count_kv", heads),
        head_dim=head_dim,
        rms_norm_eps=positive_number(key("attention.layer_norm_rms_epsilon"), f"{gguf_arch}.attention.layer_norm_rms_epsilon",
                                     source),
        rope_theta=theta,
        rope_scaling=_rope_scaling(meta, gguf_arch, reader, theta, head_dim, source),
        max_position_embeddings=size("context_length"),
        tie_word_embeddings=not any(t.name == "output.weight" for t in reader.tensors),
        attention_bias=any(t.name == "blk.0.attn_q.bias" for t in reader.tensors),
        torch_dtype=None,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_ids=list(tokenizer.eos_token_ids),
    )
    model = family.config_from_gguf(model, meta, {t.name for t in reader.tensors}, source)
    check_attention(model, source, f"{gguf_arch}.attention.head_count", f"{gguf_arch}.attention.head_count_kv")
    return model


def read_gguf_file(path: Path) -> tuple[ModelConfig, Tokenizer, GGUFStore]:
    """Parse a GGUF file. Raises ModelLoadError naming the file and the problem."""
    source = str(path)
    reader = _open_reader(path)
    check_tensor_layout(reader, path)
    try:
        meta = read_metadata(reader)
    except (ValueError, IndexError, UnicodeDecodeError) as err:
        raise ModelLoadError(f"{path}: corrupt GGUF metadata ({err})") from err
    if meta.get("split.count", 1) > 1:
        raise ModelLoadError(f"{source}: split GGUF files are not supported; merge the parts first "
                             f"(llama-gguf-split --merge)")
    family = model_registry().for_gguf(meta.get("general.architecture"))
    if family is None:
        raise ModelLoadError(f"{source}: unsupported GGUF architecture '{meta.get('general.architecture')}'; "
                             f"supported: {', '.join(model_registry().gguf_architectures())}")
    tokenizer = gguf_tokenizer(meta, source)
    config = gguf_model_config(meta, reader, tokenizer, source)
    names = family.gguf_layer_names
    unexpected = [t.name for t in reader.tensors if hf_name(t.name, names) is None and t.name != ROPE_FREQS]
    if unexpected:
        raise ModelLoadError(f"{source}: unexpected tensors for a {config.architecture} model: "
                             + ", ".join(unexpected[:3]))
    permuted = family.gguf_permuted_heads(meta["general.architecture"], config)
    return config, tokenizer, GGUFStore(reader, path, permuted, names)
