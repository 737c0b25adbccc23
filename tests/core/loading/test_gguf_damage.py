"""Damaged GGUF files are refused at open (or as their weights load) with one line naming the tensor:
a truncated copy, a flipped bit in a tensor's offset or count, a block scale turned into NaN."""
from __future__ import annotations

import struct

import pytest

from anydev.core import EngineConfig, InferEngine
from anydev.core.errors import EngineInitError
from anydev.core.loading.checkpoint import ModelLoadError, open_checkpoint
from checkpoints import write_gguf_checkpoint

gguf = pytest.importorskip("gguf")


@pytest.fixture(scope="module")
def q8_file(tmp_path_factory):
    return write_gguf_checkpoint(tmp_path_factory.mktemp("gguf") / "model.gguf", "Q8_0").path


def tensor_table(path):
    """(name, position of its u64 offset in the file, position of its first dim, data offset) per tensor."""
    reader = gguf.GGUFReader(path)
    rows = []
    for t in reader.tensors:
        name_len = len(t.name.encode())
        dims_at = t.field.offset + 8 + name_len + 4
        offset_at = dims_at + 8 * len(t.shape) + 4
        rows.append((t.name, offset_at, dims_at, int(t.data_offset), t.tensor_type.name))
    return rows


def damaged(path, tmp_path, edit):
    data = bytearray(path.read_bytes())
    edit(data)
    out = tmp_path / "damaged.gguf"
    out.write_bytes(bytes(data))
    return out


def one_line_error(call, error=ModelLoadError) -> str:
    with pytest.raises(error) as info:
        call()
    message = str(info.value)
    assert "\n" not in message and "damaged.gguf" in message
    return message


def test_a_truncated_copy_names_the_tensor_whose_data_is_cut(q8_file, tmp_path):
    last = max(tensor_table(q8_file), key=lambda row: row[3])
    path = damaged(q8_file, tmp_path, lambda d: d.__delitem__(slice(last[3] + 1, None)))
    message = one_line_error(lambda: open_checkpoint(path))
    assert "truncated GGUF file" in message and f"tensor {last[0]}'s data" in message


def test_a_flipped_offset_bit_that_keeps_the_alignment_is_an_overlap(q8_file, tmp_path):
    name, offset_at, *_ = tensor_table(q8_file)[0]

    def flip(data):
        (offset,) = struct.unpack_from("<Q", data, offset_at)
        struct.pack_into("<Q", data, offset_at, offset ^ 64)
    message = one_line_error(lambda: open_checkpoint(damaged(q8_file, tmp_path, flip)))
    assert name in message and ("overlap" in message or "past the end" in message)


def test_a_flipped_low_offset_bit_is_a_misaligned_tensor(q8_file, tmp_path):
    name, offset_at, *_ = tensor_table(q8_file)[1]

    def flip(data):
        (offset,) = struct.unpack_from("<Q", data, offset_at)
        struct.pack_into("<Q", data, offset_at, offset ^ 1)
    message = one_line_error(lambda: open_checkpoint(damaged(q8_file, tmp_path, flip)))
    assert f"tensor {name}" in message and "alignment" in message


def test_a_row_count_that_is_not_whole_blocks_is_refused(q8_file, tmp_path):
    name, _, dims_at, _, kind = next(row for row in tensor_table(q8_file) if row[4] == "Q8_0")

    def flip(data):
        (inner,) = struct.unpack_from("<Q", data, dims_at)
        struct.pack_into("<Q", data, dims_at, inner ^ 1)
    message = one_line_error(lambda: open_checkpoint(damaged(q8_file, tmp_path, flip)))
    assert f"tensor {name}" in message and "whole blocks" in message


def test_a_nan_block_scale_is_refused_as_the_weights_load_naming_the_weight(q8_file, tmp_path):
    name, _, _, data_at, _ = next(row for row in tensor_table(q8_file) if row[4] == "Q8_0" and "blk.0.ffn_down" in row[0])
    path = damaged(q8_file, tmp_path, lambda d: d.__setitem__(slice(data_at, data_at + 2), b"\x00\x7e"))   # f16 NaN
    open_checkpoint(path).close()          # the structure is sound: only the loaded scales show it
    message = one_line_error(lambda: InferEngine(path, EngineConfig(device="cpu", num_blocks=8, block_size=16)),
                             EngineInitError)
    assert "model.layers.0.mlp.down_proj" in message and "NaN" in message
