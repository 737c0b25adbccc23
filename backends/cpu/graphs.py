"""Device graphs on the cpu backend (contract 1.1, opt-in with ``ANYDEV_CPU_GRAPHS=1``).

Capture intercepts every aten op the capturing thread runs (a ``TorchDispatchMode``) and records it
without running it, as a CUDA graph capture does: ops that write their arguments (in place, ``out=``)
are recorded as they are; ops that make new tensors get outputs of the right shape now (computed on
the meta device) and, at replay, their results copied in; views are made at once (they touch no
data). Memsets, copies and collectives the thread enqueues on the graph's stream inside the capture
are recorded too (``CpuRuntime._enqueue``). Replay enqueues the whole recording on the stream, so
every replay reads the inputs as they are then.

Off by default: with it the engine on cpu would decode through these graphs, which are slower than
eager Python on a CPU; the conformance suite's graph checks and its graph mutant use it.
"""
from __future__ import annotations

import contextlib
from typing import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

from ...plugin_api.errors import InvalidArgumentError
from ...plugin_api.runtime import TorchGraph

GRAPHS_ENV = "ANYDEV_CPU_GRAPHS"


def _meta(value):
    if isinstance(value, torch.Tensor):
        return torch.empty_strided(value.size(), value.stride(), dtype=value.dtype, device="meta")
    return value


def _real_like(value):
    if isinstance(value, torch.Tensor):
        return torch.empty_strided(value.size(), value.stride(), dtype=value.dtype)
    return value


def _copy_into(outputs, results) -> None:
    if isinstance(outputs, torch.Tensor):
        outputs.copy_(results)
    elif isinstance(outputs, (tuple, list)):
        for out, res in zip(outputs, results):
            _copy_into(out, res)


def _shares_memory(result, args, kwargs) -> bool:
    """Whether every tensor of ``result`` lives in the storage of a tensor argument."""
    inputs = set()
    tree_map(lambda v: inputs.add(v.untyped_storage().data_ptr()) if isinstance(v, torch.Tensor) else None,
             (args, kwargs))
    outputs = []
    tree_map(lambda v: outputs.append(v.untyped_storage().data_ptr()) if isinstance(v, torch.Tensor) else None, result)
    return all(ptr in inputs for ptr in outputs)


def _written_argument(func, args, kwargs, alias_set):
    """The argument an op writes and returns (``self`` of ``add_``, ``out`` of ``add.out``)."""
    for position, argument in enumerate(func._schema.arguments):
        info = argument.alias_info
        if info is not None and info.is_write and set(info.before_set) & alias_set:
            if argument.name in kwargs:
                return kwargs[argument.name]
            return args[position]
    raise InvalidArgumentError(f"cpu graph capture: cannot tell which argument {func} writes")


class _Recorder(TorchDispatchMode):
    """Records the aten ops of a capture as replayable steps, running none of them."""

    def __init__(self, steps: list[Callable[[], None]]):
        super().__init__()
        self.steps = steps

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        returns = [r.alias_info for r in func._schema.returns]
        if returns and all(info is not None and not info.is_write for info in returns):
            result = func(*args, **kwargs)
            if _shares_memory(result, args, kwargs):
                return result  # a view: aliases memory the recorded ops write
            # an op that may alias but made a copy here (``to``, ``reshape``, ``contiguous``): its
            # result depends on its input's data, so it is recomputed at every replay
            self.steps.append(lambda: _copy_into(result, func(*args, **kwargs)))
            return result
        if func._schema.is_mutable:
            written = [info for info in returns if info is not None and info.is_write]
            if len(written) != len(returns):
                raise InvalidArgumentError(f"cpu graph capture: {func} both writes its arguments and makes new tensors")
            self.steps.append(lambda: func(*args, **kwargs))
            outs = [_written_argument(func, args, kwargs, set(info.before_set)) for info in written]
            return outs[0] if len(outs) == 1 else tuple(outs)
        try:
            shapes = func(*tree_map(_meta, args), **tree_map(_meta, kwargs))
        except Exception as exc:  # e.g. .item(): reads data, which a capture cannot
            raise InvalidArgumentError(
                f"cpu graph capture: {func} cannot be recorded ({type(exc).__name__}: {exc}); "
                "no host reads or data-dependent shapes inside a capture"
            ) from exc
        outputs = tree_map(_real_like, shapes)
        self.steps.append(lambda: _copy_into(outputs, func(*args, **kwargs)))
        return outputs


class CpuGraph(TorchGraph):
    """A recording of one thread's torch ops and stream work on one stream (see the module)."""

    def __init__(self, runtime, stream: int):
        self._runtime = runtime
        self._stream = stream
        self._steps: list[Callable[[], None]] = []
        self._inference = False

    @contextlib.contextmanager
    def capture(self, share_memory_with: "CpuGraph | None" = None):
        worker = self._runtime._stream("torch_graph", self._stream)
        worker.synchronize()  # what was enqueued before the capture runs before it
        self._inference = torch.is_inference_mode_enabled()
        capturing = self._runtime._current.__dict__.setdefault("capturing", {})
        capturing[self._stream] = self._steps
        try:
            with _Recorder(self._steps):
                yield
        finally:
            capturing.pop(self._stream, None)

    def replay(self) -> None:
        worker = self._runtime._stream("graph replay", self._stream)
        self._runtime._enqueue(self._stream, worker, "graph replay", self._run)

    def _run(self) -> None:
        with torch.inference_mode(self._inference), torch.no_grad():
            for step in self._steps:
                step()

    def close(self) -> None:
        self._steps = []
