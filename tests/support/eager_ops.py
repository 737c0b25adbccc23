"""Counting a step's eager host work on the cpu backend: the torch ops a thread dispatches and the
contract kernels it calls, each kernel counted as one launch whatever its reference runs inside."""
from __future__ import annotations

import collections
import contextlib

from torch.utils._python_dispatch import TorchDispatchMode

from anydev.plugin_api.kernels import KERNEL_NAMES

#: Ops that make views or read metadata: no kernel, no copy (they cost host time, not launches).
VIEW_OPS = frozenset({"aten.slice.Tensor", "aten.view.default", "aten.view.dtype", "aten._unsafe_view.default",
                      "aten.select.int", "aten.split.Tensor", "aten.split_with_sizes.default", "aten.reshape.default",
                      "aten.alias.default", "aten.as_strided.default", "aten.detach.default",
                      "aten.t.default", "aten.transpose.int", "aten.unsqueeze.default", "aten.expand.default",
                      "aten.permute.default", "aten.squeeze.dim", "aten.sym_size.int", "aten.sym_stride.int"})


class EagerOps(TorchDispatchMode):
    """Counts, on the thread that enters it, every dispatched torch op (``ops``, by aten name) and
    every call of a kernel of ``kernels`` (``ops["kernel:NAME"]``); the torch ops inside a kernel
    are not counted (a native kernel is one launch)."""

    def __init__(self, kernels):
        super().__init__()
        self.ops = collections.Counter()
        self._kernels = kernels
        self._inside = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not self._inside:
            self.ops[str(func)] += 1
        return func(*args, **(kwargs or {}))

    @contextlib.contextmanager
    def counting_kernels(self):
        """Within: each kernel of the kernel set counts as one op (the set's attributes wrapped)."""
        originals = {name: getattr(self._kernels, name) for name in KERNEL_NAMES}
        for name, fn in originals.items():
            setattr(self._kernels, name, self._counted(name, fn))
        try:
            yield self
        finally:
            for name, fn in originals.items():
                setattr(self._kernels, name, fn)

    def _counted(self, name, fn):
        def kernel(*args, **kwargs):
            self.ops[f"kernel:{name}"] += 1
            self._inside += 1
            try:
                return fn(*args, **kwargs)
            finally:
                self._inside -= 1
        return kernel

    def launches(self) -> int:
        """Ops that launch work (a kernel, a copy, an elementwise op): every op but views."""
        return sum(n for op, n in self.ops.items() if op not in VIEW_OPS)
