"""Checkpoints: one interface over HF directories, GGUF files and the embedded demo model.

    ckpt = open_checkpoint("/models/Llama-3.2-1B")     # or "model.Q4_K_M.gguf"
    ckpt.config.num_hidden_layers, ckpt.tokenizer.encode("hi")
    w = ckpt.load("model.layers.0.self_attn.q_proj.weight")   # CPU tensor, HF layout [out, in]

Every problem with the input is raised as :class:`ModelLoadError` with a one-line message.
"""
from __future__ import annotations

from pathlib import Path
import torch

from anydev.plugin_api.weight_formats import BLOCK_FORMATS

from .checkpoint_errors import ModelLoadError
from ..config import ModelConfig, expected_tensor_names
from .tensor_slices import HostTensorSlice, TensorSlice
from .tensor_store import InMemoryStore, TensorStore
from .tokenizer import ChatTemplateError, Tokenizer

__all__ = [
    "Checkpoint", "ChatTemplateError", "InMemoryStore", "ModelConfig", "ModelLoadError",
    "TensorStore", "Tokenizer", "demo_checkpoint", "open_checkpoint",
]


class Checkpoint:
    """A model's config, tokenizer and weights. ``load`` may be called from several threads."""

    def __init__(self, config: ModelConfig, tokenizer: Tokenizer, store: TensorStore, source: str):
        self.config = config
        self.tokenizer = tokenizer
        self.source = source
        self._store = store
        stored = set(store.names())
        missing = [name for name in expected_tensor_names(config) if name not in stored]
        if missing:
            shown = ", ".join(missing[:3]) + (f" (+{len(missing) - 3} more)" if len(missing) > 3 else "")
            raise ModelLoadError(f"{source}: checkpoint lacks tensors the config requires: {shown}")
        # lm_head is left out when tied, even if the file also stores it.
        self._names = [n for n in store.names() if not (config.tie_word_embeddings and n == "lm_head.weight")]

    def tensor_names(self) -> list[str]:
        return list(self._names)

    def load(self, name: str) -> torch.Tensor:
        """The tensor ``name`` on the CPU, HF layout, stored dtype (GGUF quants dequantized to float32)."""
        if name not in self._names:
            raise KeyError(f"{self.source} has no tensor '{name}'")
        return self._store.load(name)

    def tensor_slice(self, name: str, cut) -> TensorSlice:
        """The part ``cut`` (``(dim, start, length)``, or None for all) of tensor ``name``, to be read
        a block of rows at a time in the stored dtype (see :mod:`.tensor_slices`). Thread-safe."""
        if name not in self._names:
            raise KeyError(f"{self.source} has no tensor '{name}'")
        reader = getattr(self._store, "tensor_slice", None)
        if reader is not None:
            return reader(name, cut)
        return HostTensorSlice(self._store.load(name), cut)

    def stored_format(self, name: str, cut) -> str | None:
        """The quantized format (of :mod:`anydev.plugin_api.weight_formats`) in which the part ``cut``
        of tensor ``name`` is read as stored, by :meth:`stored_slice`: a GGUF block format, or
        ``fp8_e4m3`` for an HF fp8 checkpoint quantized per channel; None for float tensors (and a GGUF
        cut that splits blocks)."""
        formats = getattr(self._store, "stored_format", None)
        return formats(name, cut) if formats is not None else None

    def stored_slice(self, name: str, cut) -> TensorSlice:
        """The part ``cut`` of tensor ``name`` as stored in its :meth:`stored_format`: GGUF blocks as
        rows of ``row_bytes`` uint8; fp8 rows (their scales: :meth:`channel_scales`)."""
        fmt = self.stored_format(name, cut)
        if fmt is None:
            raise ModelLoadError(f"{self.source}: tensor '{name}' (part {cut}) is not stored in a quantized format")
        if fmt in BLOCK_FORMATS:
            return self._store.tensor_slice(name, cut, blocks=True)
        return self._store.tensor_slice(name, cut)

    def block_format(self, name: str) -> str | None:
        """The GGUF block format of :mod:`anydev.plugin_api.weight_formats` that 2-D tensor ``name`` is
        stored in, or None."""
        formats = getattr(self._store, "block_format", None)
        return formats(name) if formats is not None else None

    def block_slice(self, name: str, cut) -> TensorSlice:
        """The GGUF blocks that hold the part ``cut`` of tensor ``name``, as rows of ``row_bytes`` uint8:
        its own blocks, or where the cut splits blocks along a row, those that cover it (``covered``
        then says which of the decoded values are the part)."""
        if self.block_format(name) is None:
            raise ModelLoadError(f"{self.source}: tensor '{name}' is not stored in GGUF blocks")
        return self._store.tensor_slice(name, cut, blocks=True)

    def channel_scales(self, name: str, cut) -> torch.Tensor:
        """Float32 per-row scales of the part ``cut`` of a weight stored per channel (``fp8_e4m3``)."""
        return self._store.channel_scales(name, cut)

    def close(self) -> None:
        self._store.close()

    def __enter__(self) -> Checkpoint:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        c = self.config
        return (f"Checkpoint({self.source!r}, {c.architecture}, layers={c.num_hidden_layers}, "
                f"hidden={c.hidden_size}, vocab={c.vocab_size})")


def open_checkpoint(path) -> Checkpoint:
    """Open an HF model directory or a ``.gguf`` file."""
    given = str(path)
    path = Path(path).expanduser()
    if not path.exists():
        hint = ""
        if given.count("/") == 1 and not given.startswith((".", "/", "~")):
            hint = (f"; '{path}' looks like a model hub id, and anydev reads only local files: download it "
                    f"first (e.g. `huggingface-cli download {path} --local-dir DIR`) and pass the directory")
        raise ModelLoadError(f"model path does not exist: {path}{hint}")
    if path.is_dir():
        from .hf_loader import read_hf_directory
        config, tokenizer, store = read_hf_directory(path)
    elif path.suffix.lower() == ".gguf":
        from .gguf_loader import read_gguf_file
        config, tokenizer, store = read_gguf_file(path)
    else:
        raise ModelLoadError(f"{path}: not a model; give an HF model directory or a .gguf file")
    return Checkpoint(config, tokenizer, store, str(path))


def demo_checkpoint(seed: int = 0) -> Checkpoint:
    """The embedded demo model: small, llama-shaped, weights generated in code from ``seed``."""
    from .demo_model import build_demo_model
    config, tokenizer, store = build_demo_model(seed)
    checkpoint = Checkpoint(config, tokenizer, store, "embedded demo")
    checkpoint.recipe = (demo_checkpoint, (seed,))   # how another rank process rebuilds the same model
    return checkpoint
