"""Each rank reads only its shard of a real sharded safetensors checkpoint, through pinned staging
buffers of bounded size, and a dtype change happens on the device after the copy."""
from __future__ import annotations

import re
import threading
from collections import defaultdict

import pytest
import torch

from anydev.core import EngineConfig, InferEngine
from anydev.core.loading import safetensors_slices
from anydev.core.loading.checkpoint import open_checkpoint
from anydev.core.config import expected_tensor_names
from anydev.core.loading.hf_loader import weight_map_of
from anydev.core.loading.random_weights import llama_config, save_random_model
from anydev.core.models.sharding import rank_shard, slice_of
from anydev.core.loading.safetensors_slices import SafetensorsFile
from anydev.core.loading.weights import RankWeights
from anydev.plugin_api import Device, DeviceBuffer, HostBuffer, Stream

# 8 heads over 4 KV heads, head_dim 32: tp=2 and 4 split the KV heads, tp=8 replicates them.
SHAPE = dict(vocab_size=320, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
             num_attention_heads=8, num_key_value_heads=4)
STAGING = 16 << 10   # two 8 KiB buffers: every tensor takes several blocks


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    """The same random model stored as bfloat16, float16 and float32, each in several files."""
    config = llama_config(**SHAPE)
    dirs = {}
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        dirs[dtype] = tmp_path_factory.mktemp(str(dtype).removeprefix("torch."))
        save_random_model(dirs[dtype], config, dtype, shard_bytes=300 << 10)
    return dirs


def merged(ranges):
    out = []
    for start, end in sorted(ranges):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return [tuple(r) for r in out]


def expected_ranges(directory, config, shard) -> dict[str, list[tuple[int, int]]]:
    """Per file: the byte ranges of the rank's slice of every tensor, from the file headers."""
    ranges = defaultdict(list)
    files = {}
    for name, path in weight_map_of(directory).items():
        if name not in expected_tensor_names(config):
            continue
        source = files.setdefault(path, SafetensorsFile(path))
        dtype, shape, begin, _ = source.entry(name)
        itemsize = torch.empty((), dtype=dtype).element_size()
        row = itemsize * (shape[1] if len(shape) > 1 else 1)
        cut = slice_of(name, shard)
        if cut is None:
            ranges[path.name].append((begin, begin + row * shape[0]))
        elif cut[0] == 0:
            ranges[path.name].append((begin + cut[1] * row, begin + (cut[1] + cut[2]) * row))
        else:
            for r in range(shape[0]):
                first = begin + r * row + cut[1] * itemsize
                ranges[path.name].append((first, first + cut[2] * itemsize))
    for source in files.values():
        source.close()
    return ranges


@pytest.fixture
def read_log(monkeypatch):
    """Every byte range read from a safetensors file, by rank (from the reading thread's name)."""
    log = defaultdict(list)
    lock = threading.Lock()
    real = safetensors_slices.read_spans

    def recording(source, out, offset, rows, length, stride):
        rank = int(re.search(r"anydev-rank(\d+)", threading.current_thread().name).group(1))
        with lock:
            log[rank] += [(source.path.name, offset + r * stride, offset + r * stride + length) for r in range(rows)]
        return real(source, out, offset, rows, length, stride)

    monkeypatch.setattr(safetensors_slices, "read_spans", recording)
    return log


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_each_rank_reads_exactly_its_shard_and_the_replicated_tensors_once(model_dirs, read_log, tp):
    directory = model_dirs[torch.bfloat16]
    config = open_checkpoint(directory).config
    with InferEngine(directory, EngineConfig(tp=tp, num_blocks=4, weight_staging_bytes=STAGING,
                                             weight_read_threads=2)):
        pass
    assert sorted(read_log) == list(range(tp))
    for rank in range(tp):
        reads = defaultdict(list)
        for file, start, end in read_log[rank]:
            reads[file].append((start, end))
        expected = expected_ranges(directory, config, rank_shard(config, tp, rank))
        assert set(reads) == set(expected), f"rank {rank} read files {sorted(reads)}"
        for file, ranges in reads.items():
            assert merged(ranges) == merged(expected[file]), f"rank {rank} read other bytes of {file}"
            # once each: no byte read twice
            assert sum(e - s for s, e in ranges) == sum(e - s for s, e in merged(ranges)), (rank, file)


def test_weights_on_each_rank_equal_the_checkpoint_slices(model_dirs):
    directory = model_dirs[torch.bfloat16]
    checkpoint = open_checkpoint(directory)
    with InferEngine(checkpoint, EngineConfig(tp=2, dtype="bfloat16", num_blocks=4, weight_staging_bytes=STAGING,
                                              weight_read_threads=3)) as engine:
        for worker in engine.workers:
            for name, tensor in worker.weights.tensors.items():
                cut = slice_of(name, worker.setup.shard)
                full = checkpoint.load(name)
                assert torch.equal(tensor, full if cut is None else full.narrow(*cut)), (worker.rank, name)


@pytest.fixture
def copies(monkeypatch):
    """Every host→device copy: (source object, bytes)."""
    log = []
    real = Stream.memcpy_async

    def recording(self, dst, src, nbytes=None, dst_offset=0, src_offset=0):
        if isinstance(dst, DeviceBuffer) and not isinstance(src, DeviceBuffer):
            log.append((src, nbytes))
        return real(self, dst, src, nbytes, dst_offset, src_offset)

    monkeypatch.setattr(Stream, "memcpy_async", recording)
    return log


@pytest.mark.parametrize("stored,engine_dtype", [(torch.float16, "float32"), (torch.float32, "bfloat16"),
                                                  (torch.bfloat16, "float32")])
def test_a_dtype_change_happens_on_the_device_after_copying_the_stored_bytes(model_dirs, copies, stored, engine_dtype):
    directory = model_dirs[stored]
    checkpoint = open_checkpoint(directory)
    with InferEngine(checkpoint, EngineConfig(tp=2, dtype=engine_dtype, num_blocks=4,
                                              weight_staging_bytes=STAGING)) as engine:
        stored_size = torch.empty((), dtype=stored).element_size()
        # every copy comes from a pinned staging buffer, carrying the stored bytes: the host converted nothing
        assert copies and all(isinstance(src, HostBuffer) for src, _ in copies)
        elements = sum(t.numel() for w in engine.workers for t in w.weights.tensors.values())
        assert sum(n for _, n in copies) == elements * stored_size
        for worker in engine.workers:
            assert worker.weights.stats.stored_bytes == sum(t.numel() for t in worker.weights.tensors.values()) * stored_size
            for name, tensor in worker.weights.tensors.items():
                cut = slice_of(name, worker.setup.shard)
                full = checkpoint.load(name)
                assert full.dtype == stored
                assert torch.equal(tensor, (full if cut is None else full.narrow(*cut)).to(tensor.dtype)), name


def test_pinned_memory_is_the_staging_size_whatever_the_model(model_dirs, monkeypatch):
    live, peak, sizes, loading, after_load = [0], [0], [], [False], []
    real_alloc, real_release, real_load = Device.alloc_host, HostBuffer._release, RankWeights.load
    mine = set()   # the buffers the weight load allocated (the engine's step buffers are not counted)

    def alloc_host(self, nbytes):
        buffer = real_alloc(self, nbytes)
        if loading[0]:
            sizes.append(nbytes)
            mine.add(id(buffer))
            live[0] += nbytes
            peak[0] = max(peak[0], live[0])
        return buffer

    def release(self):
        if id(self) in mine:
            mine.discard(id(self))
            live[0] -= self.nbytes
        return real_release(self)

    def load(self, *args, **kwargs):
        loading[0] = True
        try:
            return real_load(self, *args, **kwargs)
        finally:
            loading[0] = False
            after_load.append(live[0])

    monkeypatch.setattr(Device, "alloc_host", alloc_host)
    monkeypatch.setattr(HostBuffer, "_release", release)
    monkeypatch.setattr(RankWeights, "load", load)
    with InferEngine(model_dirs[torch.float32], EngineConfig(tp=1, num_blocks=4, weight_staging_bytes=STAGING)) as engine:
        weights = engine.workers[0].weights
        assert weights.nbytes > 50 * STAGING      # the model is far larger than the staging memory
        assert weights.stats.blocks > 50
    assert sizes == [STAGING // 2, STAGING // 2]   # two buffers, once
    assert peak[0] == STAGING
    assert after_load == [0]                       # freed by the end of the load


def test_a_row_larger_than_a_staging_buffer_is_an_error_that_says_so(model_dirs):
    from anydev.core.errors import EngineInitError
    with pytest.raises(EngineInitError, match="does not fit a staging buffer"):
        InferEngine(model_dirs[torch.float32], EngineConfig(tp=1, num_blocks=4, weight_staging_bytes=1024))
