"""The device-API contract version and the compatibility rule.

The contract is versioned ``(major, minor)``:

* A **minor** bump adds optional calls (with a default in :mod:`anydev.plugin_api.runtime` that
  raises :class:`NotSupportedError`, and an entry in ``Backend.supports``). Plugins written for an
  older or a newer minor version of the same major version load unchanged.
* A **major** bump changes or removes a call. Plugins declaring another major version are refused at
  registration, with a message naming both versions.
"""
from __future__ import annotations

from .errors import ContractVersionError

#: 1.1 added the optional call ``torch_graph`` (device graphs); 1.2 the optional call ``kernels``
#: (native device kernels, :mod:`anydev.plugin_api.kernels`); 1.3 the optional point-to-point calls
#: ``send``, ``recv``, ``group_start`` and ``group_end`` (pipeline parallelism); 1.4 the optional call
#: ``comm_abort`` (communicator abort: frees a rank blocked in a collective whose peer failed); 1.5 the
#: kernels ``linear`` and ``quantized_linear`` (quantized weights, :mod:`anydev.plugin_api.weight_formats`);
#: 1.6 kernel offers for some dtypes and weight formats only (:mod:`anydev.plugin_api.kernel_offers`)
#: and the name and version declared once, on the plugin; 1.7 the mixture-of-experts kernels ``moe_route``
#: and ``moe_linear``; 1.8 the fused kernel ``qk_norm_rotary_write_kv`` (per-head q/k norms, rotary and the
#: KV write in one launch); 1.9 the kernel ``quantized_embedding`` (a quantized table's rows, dequantized
#: in one launch); 1.10 the kernels ``logprobs`` (the sampler's packed log-probabilities) and
#: ``moe_combine`` (a MoE block's weighted sum); 1.11 the weight format ``q8_0_split`` (Q8_0's values in
#: split rows, taken only by offers that name it); 1.12 the weight format ``q6_k_split`` (Q6_K's values
#: in split rows, likewise). The full list: :mod:`anydev.plugin_api.runtime`.
CONTRACT_VERSION: tuple[int, int] = (1, 12)
#: The first version whose runtimes leave their name and version to the plugin: what a plugin whose
#: runtime declares neither states at least (older anydev releases would refuse that runtime).
DECLARED_ONCE_SINCE: tuple[int, int] = (1, 6)


def format_version(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def check_compatible(plugin_name: str, plugin_version, host_version: tuple[int, int] | None = None) -> None:
    """Raise :class:`ContractVersionError` unless ``plugin_version`` can be used by this host
    (``host_version``, default: :data:`CONTRACT_VERSION` as it is when called)."""
    host_version = host_version or CONTRACT_VERSION
    try:
        major, minor = (int(part) for part in plugin_version)
    except (TypeError, ValueError):
        raise ContractVersionError(
            f"plugin '{plugin_name}' declares contract version {plugin_version!r}; expected a "
            f"(major, minor) pair such as {CONTRACT_VERSION}"
        ) from None
    if major != host_version[0]:
        raise ContractVersionError(
            f"plugin '{plugin_name}' implements device-API contract {major}.{minor}, but this anydev "
            f"implements {format_version(host_version)}; major versions must match. Install a build of "
            f"the plugin for contract {host_version[0]}.x, or an anydev release for contract {major}.x."
        )
