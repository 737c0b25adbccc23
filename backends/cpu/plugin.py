"""Registers the cpu backend through the same pluggy hook a third-party backend uses."""
from ...plugin_api import CONTRACT_VERSION, BackendPlugin, hookimpl


def _load_cpu_runtime():
    from .runtime import CpuRuntime  # imported on load, so discovery stays cheap

    return CpuRuntime()


@hookimpl
def anydev_backends():
    return [
        BackendPlugin(
            name="cpu",
            contract_version=CONTRACT_VERSION,
            load=_load_cpu_runtime,
            description="reference backend: virtual devices in host memory (ANYDEV_CPU_DEVICES, ANYDEV_CPU_DEVICE_MEMORY)",
        )
    ]
