"""benchmarks/init_bench.py on the cpu backend, from a sharded checkpoint on disk: what it reports
per rank is each rank's own shard, alone and together, and every init mode's timeline."""
from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import torch

from anydev.core.config import expected_tensor_names
from anydev.core.loading.random_weights import llama_config, save_random_model
from anydev.core.models.sharding import local_shape, rank_shard

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "init_bench.py"


def load_bench():
    spec = importlib.util.spec_from_file_location("init_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_init_bench_reports_each_ranks_shard_alone_and_together(tmp_path):
    config = llama_config(vocab_size=320, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2)
    save_random_model(tmp_path / "model", config, torch.float16, shard_bytes=200 << 10)
    out = tmp_path / "init.json"
    assert load_bench().main(["--tp", "2", "--model", str(tmp_path / "model"), "--num-blocks", "8",
                              "--limit-mib", "4", "--staging-mib", "1", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    for rank in range(2):
        shard = rank_shard(config, 2, rank)
        shard_bytes = 2 * sum(math.prod(local_shape(n, config, shard)) for n in expected_tensor_names(config))
        assert report["weights"]["alone"][rank]["stored_bytes"] == shard_bytes
        assert report["weights"]["together"][rank]["stored_bytes"] == shard_bytes
        for mode in ("serial", "sequential", "parallel"):
            assert report["modes"][mode]["ranks"][rank]["load"]["stored_bytes"] == shard_bytes
    sequential = report["modes"]["sequential"]["records"]
    assert max(r["end"] for r in sequential if r["rank"] == 0) <= min(r["start"] for r in sequential if r["rank"] == 1)
    assert report["page_cache"]["bytes"] == sum(f.stat().st_size for f in (tmp_path / "model").glob("*.safetensors"))
    assert report["ratios"]["parallel_over_slowest_rank_alone"] > 0
    assert all(g > 0 for g in report["limits"]["h2d_gbps_alone"] + [report["limits"]["host_copy_gbps_all"]])


def q8_0_shard_bytes(config, shard) -> int:
    """Stored bytes of a rank's shard of a Q8_0 file of save_random_gguf: 34 bytes per 32 values of the
    2-D tensors (the projections, the lm_head and the embedding), float32 for the norms."""
    shapes = [local_shape(n, config, shard) for n in expected_tensor_names(config)]
    return sum(math.prod(s) // 32 * 34 if len(s) == 2 else 4 * math.prod(s) for s in shapes)


def test_init_bench_from_a_gguf_file_dequantizes_each_shards_blocks_on_the_device(tmp_path):
    """Under "dequantize" the ranks still copy their shards' blocks as stored (no host decoding)."""
    from anydev.core.loading.random_weights import save_random_gguf
    config = llama_config(vocab_size=320, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2)
    save_random_gguf(tmp_path / "model.gguf", config, "Q8_0")
    out = tmp_path / "init.json"
    assert load_bench().main(["--tp", "2", "--model", str(tmp_path / "model.gguf"), "--num-blocks", "8",
                              "--limit-mib", "4", "--modes", "parallel", "--quantization", "dequantize",
                              "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["page_cache"]["bytes"] == (tmp_path / "model.gguf").stat().st_size
    for rank in range(2):
        want = q8_0_shard_bytes(config, rank_shard(config, 2, rank))
        assert report["modes"]["parallel"]["ranks"][rank]["load"]["stored_bytes"] == want
        assert report["weights"]["alone"][rank]["stored_bytes"] == want


def test_init_bench_from_a_gguf_file_copies_the_blocks_of_each_shard_as_stored(tmp_path):
    """By default the Q8_0 projections, lm_head and token embedding stay in their blocks: each rank
    copies 34 bytes per 32 values of its shard of them, and the float32 norms. The weight-load rows
    measure the same formats as the engine's init."""
    from anydev.core.loading.random_weights import save_random_gguf
    config = llama_config(vocab_size=320, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2)
    save_random_gguf(tmp_path / "model.gguf", config, "Q8_0")
    out = tmp_path / "init.json"
    assert load_bench().main(["--tp", "2", "--model", str(tmp_path / "model.gguf"), "--num-blocks", "8",
                              "--limit-mib", "4", "--modes", "parallel", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    for rank in range(2):
        shard = rank_shard(config, 2, rank)
        want = q8_0_shard_bytes(config, shard)
        assert report["modes"]["parallel"]["ranks"][rank]["load"]["stored_bytes"] == want
        assert report["weights"]["alone"][rank]["stored_bytes"] == want
        assert report["weights"]["together"][rank]["stored_bytes"] == want
        held = report["modes"]["parallel"]["ranks"][rank]["load"]["formats"]
        blocks = 7 * config.num_hidden_layers + 2               # the projections, lm_head and embedding
        assert held.startswith(f"q8_0 {blocks} tensors") and "float32 " in held, held
        assert report["weights"]["alone"][rank]["formats"] == report["weights"]["together"][rank]["formats"] == held
        reads = report["weights"]["alone"][rank]["reads"]      # per kind of tensor: [seconds, stored bytes]
        assert set(reads) == {name.rsplit(".", 2)[-2] for name in expected_tensor_names(config)}
        assert sum(nbytes for _, nbytes in reads.values()) == want
