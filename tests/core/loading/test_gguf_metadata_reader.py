"""The GGUF reader's metadata arrays (read as one part a scalar array, by a walk over the lengths a string
array) are the stock ``gguf.GGUFReader``'s values, in either byte order, and a cut inside an array is
called truncated."""
from __future__ import annotations

import numpy as np
import pytest

from anydev.core.loading.checkpoint import ModelLoadError
from checkpoints import write_gguf_checkpoint

gguf = pytest.importorskip("gguf")
from anydev.core.loading.gguf_loader import _open_reader, read_metadata  # noqa: E402  (needs gguf)

STRINGS = ["", "a", "Ġthe", "żółw", "日本語", "x" * 300, "tab\there", "\u0100\u0120"]


def write_arrays(path, endianess):
    """A GGUF file of metadata arrays of every kind (strings, ints, floats, bools, an array of arrays)
    and one tensor."""
    writer = gguf.GGUFWriter(str(path), "llama", endianess=endianess)
    writer.add_array("test.strings", STRINGS * 50)
    writer.add_array("test.ints", list(range(-5, 995)))
    writer.add_array("test.floats", [0.5 * i for i in range(300)])
    writer.add_array("test.bools", [True, False, True])
    writer.add_array("test.nested", [[1, 2], [3, 4, 5]])
    writer.add_array("test.empty", [])
    writer.add_string("test.after", "the field after the arrays")
    writer.add_tensor("token_embd.weight", np.arange(32, dtype=np.float32).reshape(4, 8))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def contents(reader) -> dict:
    return {name: field.contents() for name, field in reader.fields.items() if not name.startswith("GGUF.")}


@pytest.mark.parametrize("endianess", [gguf.GGUFEndian.LITTLE, gguf.GGUFEndian.BIG], ids=["little", "big"])
def test_every_array_reads_as_the_stock_reader_reads_it(tmp_path, endianess):
    path = write_arrays(tmp_path / "arrays.gguf", endianess)
    ours, stock = _open_reader(path), gguf.GGUFReader(path)
    assert contents(ours) == contents(stock)
    assert contents(ours)["test.strings"] == STRINGS * 50 and contents(ours)["test.after"] == "the field after the arrays"
    assert [t.name for t in ours.tensors] == ["token_embd.weight"]
    assert np.array_equal(ours.tensors[0].data, stock.tensors[0].data)


@pytest.mark.parametrize("tokenizer_model", ["gpt2", "llama"])
def test_a_models_metadata_is_the_stock_readers(tmp_path, tokenizer_model):
    path = write_gguf_checkpoint(tmp_path / "model.gguf", tokenizer_model=tokenizer_model).path
    assert read_metadata(_open_reader(path)) == read_metadata(gguf.GGUFReader(path))


def test_a_file_cut_inside_a_string_array_is_called_truncated(tmp_path):
    path = write_arrays(tmp_path / "arrays.gguf", gguf.GGUFEndian.LITTLE)
    data = path.read_bytes()
    cut = data.index("żółw".encode()) + 2             # inside one of the strings
    path.write_bytes(data[:cut])
    with pytest.raises(ModelLoadError, match="truncated GGUF file"):
        _open_reader(path)
