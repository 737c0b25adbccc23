"""``EngineConfig.worker_cls``: the class every rank is built from, named ``"package.module:Class"``.

A name rather than a class, so that every rank process (executors "mp" and "torchrun") imports the
same class from the config it receives, as vLLM's ``worker_cls`` does. The class is
:class:`~.rank_worker.RankWorker` or a subclass of it (its extension points are listed there).
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from ..errors import EngineConfigError

if TYPE_CHECKING:
    from .rank_worker import RankWorker

#: :class:`~.rank_worker.RankWorker`'s name (spelled out: EngineConfig's default, read without torch).
DEFAULT_WORKER = "anydev.core.rank.rank_worker:RankWorker"


def worker_class(name: str) -> type[RankWorker]:
    """The RankWorker subclass ``name`` ("package.module:Class") names, imported; or
    :class:`EngineConfigError` saying why it cannot be used."""
    from .rank_worker import RankWorker

    module_name, colon, attribute = name.partition(":") if isinstance(name, str) else ("", "", "")
    if not (module_name and colon and attribute):
        raise EngineConfigError(f"worker_cls must be 'package.module:Class', got {name!r}")
    try:
        found = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise EngineConfigError(f"worker_cls {name!r} cannot be loaded ({type(exc).__name__}: {exc}); name a "
                                "RankWorker subclass that every rank process can import") from exc
    if not (isinstance(found, type) and issubclass(found, RankWorker)):
        raise EngineConfigError(f"worker_cls {name!r} is {found!r}, not a subclass of {DEFAULT_WORKER}")
    return found
