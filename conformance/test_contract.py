"""Contract: the plugin registers, declares a compatible contract version, and provides every
required call with the contract's parameters (contract-shape checks, reported apart from behaviour);
its devices can be made current and report their memory (behaviour)."""
from __future__ import annotations

import inspect

import pytest

from anydev.plugin_api import (
    CONTRACT_VERSION, REQUIRED_CALLS, REQUIRED_COLLECTIVE_DTYPES, REQUIRED_REDUCE_OPS, DeviceRuntime,
    RuntimeInfo, get_registry, is_stub,
)
from anydev.plugin_api.types import DTYPE_SIZES, REDUCE_OPS


@pytest.mark.contract_shape
def test_plugin_registers(backend, backend_name):
    registry = get_registry()
    assert backend_name in registry.plugins, f"'{backend_name}' is not registered: {registry.broken.get(backend_name)}"
    plugin = registry.plugins[backend_name]
    assert plugin.name == backend_name
    assert backend.name == backend_name, f"the runtime calls itself '{backend.name}', the plugin '{backend_name}'"
    assert isinstance(backend.runtime, DeviceRuntime)


@pytest.mark.contract_shape
def test_contract_version_compatible(backend, backend_name):
    declared = get_registry().plugins[backend_name].contract_version
    implemented = backend.runtime.contract_version
    for what, version in (("plugin declares", declared), ("runtime implements", implemented)):
        assert tuple(version)[0] == CONTRACT_VERSION[0], (
            f"{what} contract {tuple(version)}; this anydev implements {CONTRACT_VERSION} (majors must match)"
        )
    assert tuple(declared) == tuple(implemented), f"plugin declares {declared}, runtime implements {implemented}"


@pytest.mark.contract_shape
@pytest.mark.parametrize("call", REQUIRED_CALLS)
def test_required_call_provided(backend, call):
    """The call exists, is implemented (not the contract's abstract stub) and takes the contract's
    parameters."""
    runtime = backend.runtime
    impl = getattr(type(runtime), call, None)
    assert callable(impl), f"{type(runtime).__name__} has no callable '{call}'"
    assert not getattr(impl, "__isabstractmethod__", False), f"'{call}' is still the contract's abstract stub"
    if is_stub(impl):
        pytest.fail(f"{call} is not implemented yet: fill it in in runtime.py (it is still marked @stub)", pytrace=False)
    contract_params = list(inspect.signature(getattr(DeviceRuntime, call)).parameters)[1:]  # without self
    try:
        inspect.signature(getattr(runtime, call)).bind(*contract_params)
    except TypeError as exc:
        pytest.fail(f"'{call}' does not accept the contract's parameters ({', '.join(contract_params)}): {exc}")


@pytest.mark.contract_shape
def test_declared_capabilities(backend):
    runtime = backend.runtime
    assert isinstance(runtime.torch_device_type, str) and runtime.torch_device_type, "torch_device_type is empty"
    assert isinstance(runtime.hardware_label, str) and runtime.hardware_label, "hardware_label is empty"
    missing_dtypes = set(REQUIRED_COLLECTIVE_DTYPES) - set(runtime.collective_dtypes)
    assert not missing_dtypes, f"collectives lack required dtypes {sorted(missing_dtypes)}"
    assert set(runtime.collective_dtypes) <= set(DTYPE_SIZES), f"unknown dtypes in {runtime.collective_dtypes}"
    missing_ops = set(REQUIRED_REDUCE_OPS) - set(runtime.reduce_ops)
    assert not missing_ops, f"all_reduce lacks required ops {sorted(missing_ops)}"
    assert set(runtime.reduce_ops) <= set(REDUCE_OPS), f"unknown reduce ops in {runtime.reduce_ops}"


def test_devices_and_memory_info(backend):
    count = backend.device_count()
    assert isinstance(count, int) and count >= 1
    for index in range(count):
        device = backend.device(index)
        device.set_current()
        assert backend.runtime.get_device() == index, f"set_device({index}) did not make it current"
        info = device.memory_info()
        assert 0 <= info.free <= info.total and info.total > 0, f"device {index}: implausible {info}"


@pytest.mark.contract_shape
def test_runtime_info_when_supported(backend):
    if not backend.runtime.supports("runtime_info"):
        pytest.skip(f"'{backend.name}' does not offer the optional call runtime_info")
    info = backend.runtime.runtime_info()
    assert isinstance(info, RuntimeInfo), f"runtime_info() returned {type(info).__name__}"
