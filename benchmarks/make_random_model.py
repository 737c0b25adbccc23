"""Write a Llama-shaped HF checkpoint directory with random weights, for runs of test_infer.py and
init_bench.py on a machine with no download (the GPU machines): config.json, generation_config.json,
safetensors weights (bf16 by default; sharded into files of --shard-gib, with an index, as transformers
saves them) and the demo model's tokenizer (ids beyond its 384 tokens decode to nothing).

    python benchmarks/make_random_model.py /tmp/llama-1b                         # ~1B: hidden 2048, 16 layers
    python benchmarks/make_random_model.py /tmp/llama-8kv --hidden 4096 --layers 8 --heads 32 --kv-heads 8
    python benchmarks/make_random_model.py /tmp/llama-8b --hidden 4096 --layers 32 --heads 32 --kv-heads 8 \\
        --intermediate 14336 --vocab 128256                                      # Llama-3-8B's shape, 16 GB
    python benchmarks/make_random_model.py /tmp/llama-1b.gguf --gguf Q8_0       # a GGUF file instead
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from anydev.core.engine_config import DTYPES, torch_dtype
from anydev.core.loading.random_weights import (GGUF_TYPES, add_shape_arguments, config_from_arguments,
                                               save_random_gguf, save_random_model)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path)
    add_shape_arguments(p)
    p.add_argument("--dtype", default="bfloat16", choices=sorted(set(DTYPES)), help="stored dtype (default bfloat16)")
    p.add_argument("--shard-gib", type=float, default=4.0, help="largest weight file, GiB (default 4)")
    p.add_argument("--gguf", choices=GGUF_TYPES, help="write one GGUF file (OUT) with 2-D weights of this type")
    args = p.parse_args(argv)

    config = config_from_arguments(args)
    start = time.perf_counter()
    if args.gguf:
        params = save_random_gguf(args.out, config, args.gguf)
        print(f"wrote {args.out}: {params / 1e6:.0f} M parameters ({args.gguf}), {args.out.stat().st_size / 1e9:.2f} GB, "
              f"{time.perf_counter() - start:.1f} s")
        return 0
    params = save_random_model(args.out, config, torch_dtype(args.dtype), int(args.shard_gib * 2**30))
    files = sorted(args.out.glob("*.safetensors"))
    print(f"wrote {args.out}: {params / 1e6:.0f} M parameters ({args.dtype}) in {len(files)} file(s), "
          f"{sum(f.stat().st_size for f in files) / 1e9:.2f} GB, {time.perf_counter() - start:.1f} s; "
          f"{config.num_hidden_layers} layers, hidden {config.hidden_size}, "
          f"heads {config.num_attention_heads}/{config.num_key_value_heads} KV")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
