"""Reading an HF model directory: config, tokenizer and safetensors weights (single or sharded)."""
from __future__ import annotations

import math
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from .checkpoint_errors import ModelLoadError
from ..config import ModelConfig, model_config_from_hf, read_json
from .hf_tokenizer import load_hf_tokenizer
from .safetensors_slices import SafetensorsFile, SafetensorsSlice
from .tokenizer import Tokenizer

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"


class SafetensorsStore:
    """Tensors of one or more safetensors files, opened lazily with ``safe_open`` (memory-mapped).

    ``weight_map`` maps each tensor name to the file holding it. Every file is opened once, here,
    so a corrupt header is reported when the checkpoint is opened rather than halfway through a load.
    ``load`` reads whole tensors through safetensors; ``tensor_slice`` reads a rank's part by byte range.
    """

    def __init__(self, weight_map: dict[str, Path]):
        self.weight_map = weight_map
        self._handles = {path: _open_safetensors(path) for path in dict.fromkeys(weight_map.values())}
        self._files = {path: SafetensorsFile(path) for path in self._handles}
        for name, path in weight_map.items():
            if name not in self._handles[path].keys():
                raise ModelLoadError(f"{path}: the index says it holds '{name}' but it does not")

    def names(self) -> list[str]:
        return list(self.weight_map)

    def load(self, name: str) -> torch.Tensor:
        if self._handles is None:
            raise ModelLoadError("the checkpoint is closed")
        return self._handles[self.weight_map[name]].get_tensor(name)

    def tensor_slice(self, name: str, cut) -> SafetensorsSlice:
        if self._handles is None:
            raise ModelLoadError("the checkpoint is closed")
        return SafetensorsSlice(self._files[self.weight_map[name]], name, cut)

    def stored_format(self, name: str, cut) -> str | None:
        """"fp8_e4m3" for a float8 e4m3 weight with one scale per output row beside it in
        ``<name>_scale`` (an fp8 checkpoint quantized per channel, e.g. quant_method fbgemm_fp8 or
        compressed-tensors' channel strategy); None for other tensors."""
        dtype, shape, _, _ = self._files[self.weight_map[name]].entry(name)
        if dtype != torch.float8_e4m3fn:
            return None
        scale = name + "_scale"
        if scale not in self.weight_map:
            raise ModelLoadError(f"{self.weight_map[name]}: tensor '{name}' is float8 e4m3 with no '{scale}'; anydev "
                                 f"reads fp8 checkpoints quantized per output channel (one scale per row)")
        scale_shape = self._files[self.weight_map[scale]].entry(scale)[1]
        if len(shape) != 2 or math.prod(scale_shape) != shape[0]:
            raise ModelLoadError(f"{self.weight_map[name]}: '{scale}' has shape {scale_shape}, not one scale per "
                                 f"output row of '{name}' {shape}; block-wise fp8 scales are not supported")
        return "fp8_e4m3"

    def channel_scales(self, name: str, cut) -> torch.Tensor:
        """The per-row scales of the rows of ``name`` that the part ``cut`` holds, float32 on the CPU."""
        scales = self.load(name + "_scale").float().reshape(-1)
        if cut is not None and cut[0] == 0:
            scales = scales[cut[1]:cut[1] + cut[2]]
        return scales.contiguous()

    def close(self) -> None:
        self._handles = None
        for file in self._files.values():
            file.close()
        self._files = {}


def _open_safetensors(path: Path):
    if not path.is_file():
        raise ModelLoadError(f"{path}: weight file is missing (named by {INDEX_FILE})")
    try:
        return safe_open(str(path), framework="pt")
    except (SafetensorError, OSError) as err:
        raise ModelLoadError(f"{path}: corrupt safetensors header ({err})") from err


def weight_map_of(directory: Path) -> dict[str, Path]:
    """Which file holds each tensor: from the index when there is one (only the files it names),
    else from the single ``model.safetensors``."""
    index_path = directory / INDEX_FILE
    if index_path.is_file():
        index = read_json(index_path)
        if not isinstance(index.get("weight_map"), dict):
            raise ModelLoadError(f"{index_path}: has no 'weight_map'")
        return {name: directory / file for name, file in index["weight_map"].items()}
    single = directory / SINGLE_FILE
    if single.is_file():
        names = _open_safetensors(single).keys()
        return {name: single for name in names}
    hint = "; PyTorch .bin weights are not supported, convert them to safetensors" \
        if any(directory.glob("*.bin")) else ""
    raise ModelLoadError(f"{directory}: no weights found (looked for {SINGLE_FILE} and {INDEX_FILE}){hint}")


def read_hf_directory(directory: Path) -> tuple[ModelConfig, Tokenizer, SafetensorsStore]:
    """Parse an HF model directory. Raises ModelLoadError naming the file at fault."""
    config_path = directory / "config.json"
    if not config_path.is_file():
        raise ModelLoadError(f"{directory}: no config.json; is this an HF model directory?")
    generation_path = directory / "generation_config.json"
    generation = read_json(generation_path) if generation_path.is_file() else None
    config = model_config_from_hf(read_json(config_path), generation, str(directory))
    store = SafetensorsStore(weight_map_of(directory))
    tokenizer = load_hf_tokenizer(directory, config)
    return config, tokenizer, store
