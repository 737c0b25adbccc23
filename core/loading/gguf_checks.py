"""Checks of a GGUF file's structure at open, and of its block scales as they load.

A damaged file (a flipped bit in a tensor's offset, a bad count, a cut copy) otherwise loads and
then fails every request far from its cause. Each check raises one ModelLoadError naming the tensor.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from anydev.plugin_api.weight_formats import BLOCK_FORMATS

from .checkpoint_errors import ModelLoadError

if TYPE_CHECKING:   # gguf (and the yaml it imports) loads with a GGUF file only: off a safetensors start-up
    from gguf import GGUFReader

#: Byte offsets of the float16 scale fields inside one block of each GGUF block format (``d``, and
#: ``m``/``dmin`` where the format has one); they are what a flipped bit turns into NaN or infinity.
BLOCK_SCALE_OFFSETS = {"q8_0": (0,), "q4_0": (0,), "q4_1": (0, 2), "q4_k": (0, 2), "q6_k": (208,)}


#: Largest gap between one tensor's data and the next that alignment padding explains.
_PADDING_AT_MOST = 4096


@dataclass(frozen=True)
class TableProblem:
    """What is wrong with a tensor table; ``cut_at`` is set when it reads as a cut copy (the tensors'
    data lies end to end and only the file's tail is missing): the byte the contents run to."""
    message: str
    tensor: str
    cut_at: int | None = None


def tensor_table_problem(start_offs: int, fields, size: int) -> TableProblem | None:
    """What is wrong with the file's tensor table (the reader's fields, before it maps them), or None:
    a type it does not know, rows that are not whole blocks of the type, data past the file's
    ``size`` bytes."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    spans = []
    for field in fields:
        _, raw_name, _, dims, raw_type, offset = field.parts
        name = bytes(raw_name).decode(errors="replace")
        try:
            kind = GGMLQuantizationType(int(raw_type[0]))
            block, type_bytes = GGML_QUANT_SIZES[kind]
        except (ValueError, KeyError):
            return TableProblem(f"tensor {name}: unknown tensor type {int(raw_type[0])}", name)
        shape = [int(d) for d in dims.tolist()]
        if shape and shape[0] % block:
            return TableProblem(f"tensor {name}: its rows of {shape[0]} values are not whole blocks of {block} "
                                f"({kind.name})", name)
        count = 1
        for d in shape:
            count *= d
        start = start_offs + int(offset[0])
        spans.append((start, start + count // block * type_bytes, name))
    past = [span for span in spans if span[1] > size]
    if not past:
        return None
    spans.sort()
    end_to_end = all(later[0] - earlier[1] in range(_PADDING_AT_MOST + 1) for earlier, later in zip(spans, spans[1:]))
    _, end, name = max(past, key=lambda span: span[1]) if end_to_end else past[0]
    return TableProblem(f"tensor {name}: its data runs to byte {end}, past the end of the file ({size} bytes)",
                        name, cut_at=end if end_to_end else None)


def check_tensor_layout(reader: GGUFReader, path: Path) -> None:
    """Every tensor aligned as the file says, none overlapping another (the table itself was checked
    by :func:`tensor_table_problem` as the reader read it)."""
    alignment = reader.alignment
    spans = []
    for t in reader.tensors:
        start = int(t.data_offset)
        if (start - reader.data_offset) % alignment:
            raise ModelLoadError(f"{path}: tensor {t.name}: its data offset {start - reader.data_offset} is not a "
                                 f"multiple of the file's alignment {alignment}; the file is damaged")
        spans.append((start, start + int(t.n_bytes), t.name))
    spans.sort()
    for (_, end, first), (start, _, second) in zip(spans, spans[1:]):
        if start < end:
            raise ModelLoadError(f"{path}: tensors {first} and {second} overlap in the file (bytes {start}..{end}); "
                                 "the file is damaged")


def block_scales(data: torch.Tensor, weight_format: str) -> torch.Tensor:
    """The float16 scale fields of every block of ``data`` (uint8 rows of whole blocks), on its device."""
    blocks = data.reshape(-1, BLOCK_FORMATS[weight_format].bytes)
    fields = [blocks[:, at:at + 2] for at in BLOCK_SCALE_OFFSETS[weight_format]]
    return torch.cat(fields, dim=1).contiguous().view(torch.float16)
