"""benchmarks/launch_count.py's counting: an aten op is a launch unless it is a view, an allocation or
metadata; a view op that had to copy (reshape of a strided view) is one; Triton's interpreter's own torch
calls inside a launch are not; the linear kernel's label names its format and path. No timing."""
from __future__ import annotations

import collections

import torch

from test_family_benchmarks import load


def _counted(fn) -> collections.Counter:
    launch_count = load("launch_count")
    counter = launch_count.LaunchCounter()
    counter._local.step = collections.Counter()
    with torch.inference_mode(), launch_count._AtenCounter(counter):     # as the model runs
        fn(counter)
    return counter._local.step


def test_views_allocations_and_metadata_are_not_launches_but_copies_are():
    qkv = torch.randn(4, 8, 16)

    def step(counter):
        q = qkv.split((4, 2, 2), dim=1)[0]
        q[:1].reshape(4, 16)                    # one row: a view
        q.reshape(16, 16)                       # four strided rows: a copy
        torch.empty(3)
        torch.promote_types(torch.float32, torch.bfloat16)
        q.float() + 1                           # float32 already: no copy; the add is a launch
        counter._local.in_kernel = True         # as inside a Triton launch
        q.clone()
        counter._local.in_kernel = False

    assert _counted(step) == {"aten.reshape (a copy)": 1, "aten.add": 1}


def test_the_linear_kernels_label_names_its_format_and_path():
    from anydev.backends.triton_kernels._weight_tiles import CODES

    label = load("launch_count")._kernel_label
    assert label("_linear_kernel", dict(FORMAT=CODES["q4_k"], INT_DOT=True, SLICES=1)) == "_linear_kernel [q4_k, int-dot]"
    assert label("_linear_kernel", dict(FORMAT=CODES["dense"], SLICES=4)) == "_linear_kernel [dense, split-K]"
    assert label("_rotary_kernel", dict(NORM=True)) == "_rotary_kernel"
