"""The shared Triton attention kernels compile once for every batch composition. Triton specializes an
integer argument that equals 1 or is divisible by 16 (a compiled kernel per case), so an argument that
changes from step to step (the sequence count, the block-table width, the decode partition count) must
be marked ``do_not_specialize``, or a new batch recompiles the kernel mid-serving.

Checked under Triton's interpreter in a child process (the interpreter is chosen when the kernels are
imported): each kernel runs on batches of 1, 16 and 17 sequences with block tables 1, 16 and 17 wide,
its output equals the torch reference's each time, and every integer argument whose Triton
specialization differs between those launches is one the kernel does not specialize."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from anydev.backends.triton_kernels import triton_importable

CHILD = textwrap.dedent("""
    import json, sys
    import torch
    from triton.runtime.jit import JITFunction
    from anydev.backends.triton_kernels import attention_decode, attention_prefill
    from anydev.plugin_api import kernels as reference

    class Recording:
        '''A kernel that records each launch's positional (non-constexpr) arguments by name.'''
        def __init__(self, kernel):
            self.kernel = kernel
            # What a compiled (not interpreted) kernel would know of its parameters.
            self.params = JITFunction(kernel.fn, **kernel.kwargs).params
            self.launches = []

        def __getitem__(self, grid):
            def launch(*args, **constexprs):
                self.launches.append(dict(zip((p.name for p in self.params), args)))
                return self.kernel[grid](*args, **constexprs)
            return launch

    def specialization(value):
        '''Triton's specialization of an integer argument: equal to 1, divisible by 16, or neither.'''
        return "== 1" if value == 1 else "% 16" if value % 16 == 0 else "none"

    def report(recording, errors):
        '''The integer arguments whose specialization changes between the launches: all of them,
        and those the kernel still specializes (each would compile another kernel).'''
        varying, specialized = [], []
        for param in recording.params:
            values = [launch[param.name] for launch in recording.launches if param.name in launch]
            if param.is_constexpr or not all(type(v) is int for v in values):
                continue
            if len({specialization(v) for v in values}) > 1:
                varying.append(param.name)
                if not param.do_not_specialize:
                    specialized.append(param.name)
        return {"max_error": max(errors), "varying": varying, "specialized": specialized,
                "launches": len(recording.launches)}

    gen = torch.Generator().manual_seed(0)
    block_size, kv_heads, heads, head_dim, num_blocks = 16, 2, 4, 32, 40
    k = torch.randn(num_blocks, block_size, kv_heads, head_dim, generator=gen)
    v = torch.randn(num_blocks, block_size, kv_heads, head_dim, generator=gen)
    compositions = [(1, 1), (16, 16), (17, 17), (16, 1), (1, 17)]   # (sequences, table width)

    prefill = attention_prefill._prefill_kernel = Recording(attention_prefill._prefill_kernel)
    errors = []
    for num_seqs, width in compositions:
        q_lens = [1 + (b * 5) % 7 for b in range(num_seqs)]
        seq_lens = [q_len + (b * 3) % 9 for b, q_len in enumerate(q_lens)]   # at most one page
        cu = torch.tensor([0] + q_lens, dtype=torch.int32).cumsum(0, dtype=torch.int32)
        lens = torch.tensor(seq_lens, dtype=torch.int32)
        tables = torch.randint(0, num_blocks, (num_seqs, width), generator=gen, dtype=torch.int32)
        q = torch.randn(sum(q_lens), heads, head_dim, generator=gen)
        got = attention_prefill.paged_prefill_attention(q, k, v, cu, lens, tables, 0.125)
        want = reference.paged_prefill_attention(q, k, v, cu, lens, tables, 0.125)
        errors.append(float((got - want).abs().max()))
    result = {"prefill": report(prefill, errors)}

    decode = attention_decode._decode_kernel = Recording(attention_decode._decode_kernel)
    errors = []
    for num_seqs, width in compositions:
        lens = torch.tensor([1 + (b * 37) % (block_size * width) for b in range(num_seqs)], dtype=torch.int32)
        tables = torch.randint(0, num_blocks, (num_seqs, width), generator=gen, dtype=torch.int32)
        q = torch.randn(num_seqs, heads, head_dim, generator=gen)
        got = attention_decode.paged_decode_attention(q, k, v, tables, lens, 0.125)
        want = reference.paged_decode_attention(q, k, v, tables, lens, 0.125)
        errors.append(float((got - want).abs().max()))
    result["decode"] = report(decode, errors)
    json.dump(result, sys.stdout)
""")


@pytest.fixture(scope="module")
def launched():
    if not triton_importable():
        pytest.skip("triton is not installed (pip install triton)")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.mark.parametrize("kernel, changing", [
    ("prefill", {"num_seqs", "stride_tb"}),
    ("decode", {"num_splits", "stride_tb"}),
])
def test_a_new_batch_composition_needs_no_new_kernel(launched, kernel, changing):
    result = launched[kernel]
    assert result["launches"] == 5
    assert result["max_error"] < 1e-4, f"the {kernel} kernel's output differs from the reference"
    # The launches do change these arguments' specialization: without the mark they would recompile.
    assert changing <= set(result["varying"]), result
    assert not result["specialized"], (
        f"the {kernel} kernel specializes {result['specialized']}, which change with the batch: "
        f"mark them do_not_specialize")
