"""Test and benchmark seams of the engine, kept out of the public
:class:`~anydev.core.engine.EngineConfig`.

Pass ``InferEngine(..., _hooks=TestHooks(...))``; nothing outside tests, the conformance suite and
the benchmarks should.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class TestHooks:
    __test__ = False   # not a pytest class

    #: ``(stream, replay_eagerly) -> graph``: makes a rank's decode graphs instead of the device API's
    #: ``stream.create_graph()`` (a test double on a backend without device graphs calls
    #: ``replay_eagerly()`` at replay). Setting it turns graphs on where the backend has none.
    graph_factory: Callable | None = None
    #: Rank r raises during init phase p (one of ``anydev.core.timeline.PHASES``): the failure path.
    fail_at: tuple[int, str] | None = None
    #: How ranks zero their KV cache: "memset" (one async device memset) or "host" (host zeros copied
    #: layer by layer, a sync after each); None: as ``init_mode`` implies (parallel: memset, serial:
    #: host). ``benchmarks/init_bench.py`` crosses it with ``init_mode`` to attribute the init gain.
    kv_zero: str | None = None
