"""Pipeline parallelism: which layers each stage holds, where a rank sits, and the config checks.

``tp * pp`` ranks: rank ``stage * tp + tp_rank``. The layers are split into ``pp`` contiguous stages
(the first ``num_layers % pp`` stages get one layer more); TP runs inside a stage, PP across stages.
The first stage embeds, the last applies the final norm and the lm_head (and its tp rank 0 samples);
between stages, the hidden states and the residual move by point-to-point send/recv (contract 1.3),
tp rank j of one stage to tp rank j of the next. Each rank loads only its stage's weights and keeps
KV cache only for its stage's layers.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import EngineConfigError
from .sharding import check_tp


class PipelineConfigError(EngineConfigError):
    """A pipeline-parallel setting that cannot work (more stages than layers, too few devices, a
    backend without send/recv, an executor without pipeline stages); the message says how to fix it."""


@dataclass(frozen=True)
class Stage:
    """Stage ``index`` of ``count``: layers ``first_layer`` .. ``end_layer - 1``."""

    index: int
    count: int
    first_layer: int
    end_layer: int

    @property
    def is_first(self) -> bool:
        return self.index == 0

    @property
    def is_last(self) -> bool:
        return self.index == self.count - 1

    @property
    def layers(self) -> range:
        return range(self.first_layer, self.end_layer)

    def holds(self, name: str, tie_word_embeddings: bool) -> bool:
        """Whether this stage loads checkpoint tensor ``name``: its layers' tensors, the embedding on
        the first stage (and on the last when the lm_head is tied to it), norm and lm_head on the last."""
        if name.startswith("model.layers."):
            return int(name.split(".")[2]) in self.layers
        if name == "model.embed_tokens.weight":
            return self.is_first or (self.is_last and tie_word_embeddings)
        return self.is_last    # model.norm.weight, lm_head.weight


def stages(num_layers: int, pp: int) -> list[Stage]:
    """The ``pp`` contiguous stages of ``num_layers`` layers (the first ones one layer longer when
    ``pp`` does not divide them)."""
    base, extra = divmod(num_layers, pp)
    out, first = [], 0
    for index in range(pp):
        end = first + base + (index < extra)
        out.append(Stage(index, pp, first, end))
        first = end
    return out


@dataclass(frozen=True)
class RankLayout:
    """Where each of ``tp * pp`` ranks sits: rank ``stage * tp + tp_rank``. Every stage/tp-rank
    computation of the engine, its executors and its ranks goes through here."""

    tp: int = 1
    pp: int = 1

    @property
    def world(self) -> int:
        return self.tp * self.pp

    def position(self, rank: int) -> tuple[int, int]:
        """(stage, tp rank) of rank ``rank``."""
        return divmod(rank, self.tp)

    def stage_ranks(self, stage: int) -> range:
        """The ranks of stage ``stage``, tp rank 0 first."""
        return range(stage * self.tp, (stage + 1) * self.tp)

    @property
    def sampler(self) -> int:
        """The rank that samples the step's tokens: tp rank 0 of the last stage."""
        return (self.pp - 1) * self.tp

    def previous(self, rank: int) -> int | None:
        """The rank of the stage before that sends ``rank`` its activations (None on the first stage)."""
        return rank - self.tp if rank >= self.tp else None

    def next(self, rank: int) -> int | None:
        """The rank of the next stage that ``rank`` sends its activations to (None on the last stage)."""
        return rank + self.tp if rank + self.tp < self.world else None

    def stages(self, num_layers: int) -> list[Stage]:
        return stages(num_layers, self.pp)

    def __str__(self) -> str:
        return f"tp={self.tp}" + (f" x pp={self.pp}" if self.pp > 1 else "")

    def check_model(self, config) -> None:
        """Raise :class:`EngineConfigError` when this layout cannot split a model of ``config``."""
        check_tp(config, self.tp)
        check_pp(config, self.pp)

    def check_devices(self, backend, needed: int | None = None) -> None:
        """Raise :class:`EngineConfigError` unless ``backend`` has ``needed`` devices (default: one per
        rank) and, at pp > 1, point-to-point send/recv."""
        needed = self.world if needed is None else needed
        count = backend.device_count()
        if needed > count:
            error = PipelineConfigError if self.pp > 1 else EngineConfigError
            raise error(f"{self} needs {needed} devices, but backend '{backend.name}' has {count}")
        if self.pp > 1 and not backend.supports("send"):
            raise PipelineConfigError(
                f"pp={self.pp} moves activations between stages with send/recv, which backend '{backend.name}' does "
                "not offer (optional since contract 1.3); run with pp=1"
            )


def check_pp(config, pp) -> None:
    """Raise :class:`PipelineConfigError` when ``pp`` cannot split this model."""
    if not isinstance(pp, int) or isinstance(pp, bool) or pp < 1:
        raise PipelineConfigError(f"pp must be an integer >= 1, got {pp!r}")
    if pp > config.num_hidden_layers:
        raise PipelineConfigError(
            f"pp={pp} needs at least {pp} layers (one per stage), but the model has {config.num_hidden_layers}; "
            f"use pp={config.num_hidden_layers} or fewer"
        )
