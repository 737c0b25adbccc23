"""Run a script with module attributes set first, for a timing of a kernel constant's other value
without a tree of its own (each engine in the script's process sees the attribute):

    python parts/with_attrs.py anydev.backends.triton_kernels.attention_decode.WHOLE_BLOCK_N=256 -- \\
        benchmarks/gguf_peer_bench.py ARGS...
"""
from __future__ import annotations

import ast
import importlib
import runpy
import sys


def main():
    split = sys.argv.index("--")
    for assignment in sys.argv[1:split]:
        target, value = assignment.split("=", 1)
        module, attr = target.rsplit(".", 1)
        mod = importlib.import_module(module)
        if not hasattr(mod, attr):
            raise SystemExit(f"{module} has no attribute {attr}")
        setattr(mod, attr, ast.literal_eval(value))
        print(f"with {target} = {value}", flush=True)
    script = sys.argv[split + 1]
    sys.argv = sys.argv[split + 1:]
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
