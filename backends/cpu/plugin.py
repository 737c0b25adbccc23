"""Registers the cpu backend through the same pluggy hook a third-party backend uses."""
from ...plugin_api import CONTRACT_VERSION, BackendPlugin, hookimpl
from . import NAME


def _load_cpu_runtime():
    import os

    from .runtime import CpuGraphRuntime, CpuRuntime  # imported on load, so discovery stays cheap

    graphs = os.environ.get("ANYDEV_CPU_GRAPHS", "0").strip()
    if graphs not in ("0", "1", ""):
        raise ValueError(f"ANYDEV_CPU_GRAPHS must be 0 or 1 (device graphs on the cpu backend), got {graphs!r}")
    return CpuGraphRuntime() if graphs == "1" else CpuRuntime()


@hookimpl
def anydev_backends():
    return [
        BackendPlugin(
            name=NAME,
            contract_version=CONTRACT_VERSION,
            load=_load_cpu_runtime,
            description="reference backend: virtual devices in host memory (ANYDEV_CPU_DEVICES, ANYDEV_CPU_DEVICE_MEMORY; ANYDEV_CPU_GRAPHS=1 for device graphs)",
        )
    ]
