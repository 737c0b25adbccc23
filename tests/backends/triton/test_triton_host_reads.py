"""The shared Triton prefill attention reads no tensor back to the host. The engine runs it once per
layer between the piecewise graphs of a prefill or mixed step, where every host read stalls the
device until the step so far has run. Checked under Triton's interpreter in a child process (the
interpreter is chosen when the kernels are imported): every torch call the kernel's Python makes is
recorded, and none may be one that reads a value back."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from anydev.backends.triton_kernels import triton_importable

#: Tensor methods that hand a value to the host (on a device tensor, each waits for the device).
HOST_READS = ("item", "tolist", "cpu", "numpy", "__int__", "__float__", "__bool__", "__index__")

CHILD = textwrap.dedent("""
    import json, sys
    import torch
    from torch.overrides import TorchFunctionMode
    from anydev.backends.triton_kernels.attention_prefill import paged_prefill_attention
    from anydev.plugin_api import kernels as reference

    class Calls(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.names = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            self.names.append(getattr(func, "__name__", str(func)))
            return func(*args, **(kwargs or {}))

    gen = torch.Generator().manual_seed(0)
    block_size, kv_heads, heads, head_dim = 16, 2, 4, 64
    k = torch.randn(8, block_size, kv_heads, head_dim, generator=gen)
    v = torch.randn(8, block_size, kv_heads, head_dim, generator=gen)
    # a prompt chunk after a cached prefix, a decode, a whole prompt (queries, keys)
    q_lens, seq_lens = [40, 1, 30], [70, 9, 30]
    cu = torch.tensor([0, 40, 41, 71], dtype=torch.int32)
    lens = torch.tensor(seq_lens, dtype=torch.int32)
    tables = torch.tensor([[0, 1, 2, 3, 4], [5, 0, 0, 0, 0], [6, 7, 0, 0, 0]], dtype=torch.int32)
    q = torch.randn(sum(q_lens), heads, head_dim, generator=gen)
    with Calls() as calls:
        got = paged_prefill_attention(q, k, v, cu, lens, tables, 0.125)
    want = reference.paged_prefill_attention(q, k, v, cu, lens, tables, 0.125)
    json.dump({"calls": calls.names, "max_error": float((got - want).abs().max())}, sys.stdout)
""")


@pytest.mark.skipif(not triton_importable(), reason="triton is not installed (pip install triton)")
def test_prefill_attention_reads_nothing_back_to_the_host():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["max_error"] < 1e-4, "the kernel's output differs from the reference: it did not run as checked"
    reads = sorted({name for name in result["calls"] if name in HOST_READS})
    assert not reads, f"paged_prefill_attention reads tensors back to the host: {reads}"
