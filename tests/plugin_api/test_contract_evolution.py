"""Contract evolution: minor versions add optional calls without breaking plugins; majors are refused.

A plugin here is a real pluggy plugin module (put in ``sys.modules``) whose runtime implements the
required calls of contract 1.0 and nothing newer, declaring its name and version on the runtime too (the
style up to 1.5). The host is the real contract 1.12, whose minor bumps
added the optional calls ``torch_graph`` (1.1, device graphs), ``kernels`` (1.2, native device
kernels), point-to-point ``send``/``recv``/``group_start``/``group_end`` (1.3) and ``comm_abort``
(1.4), the kernels ``linear`` and ``quantized_linear`` (1.5), kernel offers for some inputs (1.6) and
the mixture-of-experts kernels ``moe_route`` and ``moe_linear`` (1.7) and the fused
``qk_norm_rotary_write_kv`` (1.8), the kernel ``quantized_embedding`` (1.9) and the kernels
``logprobs`` and ``moe_combine`` (1.10) and the weight formats ``q8_0_split`` (1.11) and
``q6_k_split`` (1.12); a later minor is simulated by monkeypatching the host's contract version and adding an
optional call to ``DeviceRuntime``, as a minor release would.
"""
from __future__ import annotations

import sys
import types

import pytest

from anydev.plugin_api import (
    BackendPlugin, ContractVersionError, DeviceRuntime, NotSupportedError, PluginError, Registry,
    hookimpl, runtime as runtime_module, version,
)
from anydev.plugin_api import discovery
from anydev.plugin_api import kernels as kernels_module

NEW_CALL = "stream_priority_range"   # a simulated contract 1.13 call
GRAPH_CALL = "torch_graph"           # the real contract 1.1 call
KERNELS_CALL = "kernels"             # the real contract 1.2 call
P2P_CALLS = ("send", "recv", "group_start", "group_end")   # the real contract 1.3 calls
ABORT_CALL = "comm_abort"                                 # the real contract 1.4 call


def _runtime_class(name: str, contract_version: tuple[int, int]) -> type[DeviceRuntime]:
    """A runtime implementing every call of contract 1.0 (and nothing newer), declaring ``contract_version``."""

    def make_call(call):
        def body(self, *args, **kwargs):
            return f"{call} called"
        body.__name__ = call
        return body

    methods = {call: make_call(call) for call in runtime_module.REQUIRED_CALLS}
    attrs = dict(methods, name=name, contract_version=contract_version, torch_device_type="cpu")
    return type(f"Runtime_{name}", (DeviceRuntime,), attrs)


def _install_plugin(monkeypatch, name: str, declared: tuple[int, int], runtime_version=None) -> str:
    """Put a plugin module declaring ``declared`` in sys.modules; return its module name."""
    runtime_cls = _runtime_class(name, runtime_version or declared)
    module = types.ModuleType(f"evolution_plugin_{name}")

    @hookimpl
    def anydev_backends():
        return [BackendPlugin(name=name, contract_version=declared, load=runtime_cls)]

    module.anydev_backends = anydev_backends
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return module.__name__


@pytest.fixture
def host_1_13(monkeypatch):
    """Make this process look like anydev with contract 1.13, which added the optional call NEW_CALL."""
    monkeypatch.setattr(version, "CONTRACT_VERSION", (1, 13))

    def stream_priority_range(self) -> tuple[int, int]:
        """(least, greatest) stream priority (optional, contract 1.13)."""
        raise NotSupportedError(f"{self.name} does not provide {NEW_CALL} (added in contract 1.13)")

    monkeypatch.setattr(DeviceRuntime, NEW_CALL, stream_priority_range, raising=False)
    monkeypatch.setattr(runtime_module, "OPTIONAL_CALLS", runtime_module.OPTIONAL_CALLS + (NEW_CALL,))


def test_this_host_is_contract_1_12_with_torch_graph_kernels_send_recv_and_comm_abort_optional():
    assert version.CONTRACT_VERSION == (1, 12)
    for call in (GRAPH_CALL, KERNELS_CALL, *P2P_CALLS, ABORT_CALL):
        assert call in runtime_module.OPTIONAL_CALLS and call not in runtime_module.REQUIRED_CALLS


def test_1_0_plugin_loads_on_the_1_8_host_without_torch_graph_kernels_send_recv_or_comm_abort(monkeypatch):
    module_name = _install_plugin(monkeypatch, "old10", (1, 0))
    registry = Registry(builtin_modules=(module_name,), entry_point_group=None)
    assert registry.broken == {}
    backend = registry.load("old10")
    assert backend.runtime.contract_version == (1, 0)
    assert backend.supports("device_count")
    assert not backend.supports(GRAPH_CALL)
    with pytest.raises(NotSupportedError, match=GRAPH_CALL):
        backend.runtime.torch_graph(1, 0)
    # No native kernels: every kernel is the torch reference.
    assert not backend.supports(KERNELS_CALL)
    assert backend.kernels().native == frozenset()
    assert backend.kernels().rms_norm is kernels_module.rms_norm
    assert backend.kernels().quantized_linear is kernels_module.quantized_linear
    assert backend.kernels().moe_linear is kernels_module.moe_linear
    assert backend.kernels().logprobs is kernels_module.logprobs
    assert backend.kernels().moe_combine is kernels_module.moe_combine
    # No point-to-point calls: supports says so and each call says which contract added it.
    for call in P2P_CALLS:
        assert not backend.supports(call)
    with pytest.raises(NotSupportedError, match=r"send.*1\.3"):
        backend.runtime.send(0, 1, "float32", 1, 1, 1)
    # No communicator abort: the engine keeps its old behaviour (see anydev.core.executors.abort).
    assert not backend.supports(ABORT_CALL)
    with pytest.raises(NotSupportedError, match=r"comm_abort.*1\.4"):
        backend.runtime.comm_abort(1)
    # The old plugin's own calls still work.
    assert backend.runtime.device_count() == "device_count called"


def test_1_1_plugin_that_implements_torch_graph_reports_it(monkeypatch):
    module_name = _install_plugin(monkeypatch, "new11", (1, 1))
    registry = Registry(builtin_modules=(module_name,), entry_point_group=None)
    runtime_cls = registry.plugins["new11"].load
    monkeypatch.setattr(runtime_cls, GRAPH_CALL, lambda self, stream, index: ("graph", stream, index), raising=False)
    backend = registry.load("new11")
    assert backend.supports(GRAPH_CALL)
    assert backend.runtime.torch_graph(7, 0) == ("graph", 7, 0)


def test_1_0_plugin_loads_on_a_1_13_host_without_the_newer_optional_call(monkeypatch, host_1_13):
    module_name = _install_plugin(monkeypatch, "old10", (1, 0))
    registry = Registry(builtin_modules=(module_name,), entry_point_group=None)
    assert registry.broken == {}
    backend = registry.load("old10")
    assert NEW_CALL in runtime_module.OPTIONAL_CALLS
    assert not backend.supports(NEW_CALL) and not backend.supports(GRAPH_CALL)
    with pytest.raises(NotSupportedError, match=NEW_CALL):
        getattr(backend.runtime, NEW_CALL)()
    assert backend.runtime.device_count() == "device_count called"


def test_1_13_plugin_that_implements_the_newer_call_reports_it(monkeypatch, host_1_13):
    module_name = _install_plugin(monkeypatch, "new113", (1, 13))
    registry = Registry(builtin_modules=(module_name,), entry_point_group=None)
    runtime_cls = registry.plugins["new113"].load
    monkeypatch.setattr(runtime_cls, NEW_CALL, lambda self: (-1, 0), raising=False)
    backend = registry.load("new113")
    assert backend.supports(NEW_CALL)
    assert getattr(backend.runtime, NEW_CALL)() == (-1, 0)


def test_1_2_plugin_with_some_kernels_gets_them_and_the_references_for_the_rest(monkeypatch):
    module_name = _install_plugin(monkeypatch, "kern12", (1, 2))
    registry = Registry(builtin_modules=(module_name,), entry_point_group=None)
    runtime_cls = registry.plugins["kern12"].load

    def my_rms_norm(x, weight, eps):
        return x

    monkeypatch.setattr(runtime_cls, KERNELS_CALL, lambda self: {"rms_norm": my_rms_norm}, raising=False)
    monkeypatch.setattr(runtime_cls, "kernels_note", "hand-written", raising=False)
    backend = registry.load("kern12")
    kernels = backend.kernels()
    assert backend.supports(KERNELS_CALL)
    assert kernels.native == {"rms_norm"} and kernels.rms_norm is my_rms_norm
    assert kernels.silu_and_mul is kernels_module.silu_and_mul
    assert "native (hand-written) rms_norm" in kernels.describe()
    assert "reference write_kv" in kernels.describe()


def test_a_fused_kernel_not_offered_is_composed_of_the_backends_own_parts(monkeypatch):
    """rotary_write_kv (1.3) on a 1.2 plugin that offers rotary_embedding and write_kv: its two kernels,
    in order, with the fused call's arguments."""
    module_name = _install_plugin(monkeypatch, "parts12", (1, 2))
    registry = Registry(builtin_modules=(module_name,), entry_point_group=None)
    runtime_cls = registry.plugins["parts12"].load
    calls = []
    offered = {"rotary_embedding": lambda positions, q, k, cache: calls.append(("rotary", positions, q, k, cache)),
               "write_kv": lambda key, value, kc, vc, slots: calls.append(("write", key, value, kc, vc, slots))}
    monkeypatch.setattr(runtime_cls, KERNELS_CALL, lambda self: offered, raising=False)
    kernels = registry.load("parts12").kernels()
    assert "rotary_write_kv" not in kernels.native
    assert "; rotary_write_kv as rotary_embedding + write_kv" in kernels.describe()
    kernels.rotary_write_kv("pos", "q", "k", "v", "kc", "vc", "slots", "cos_sin")
    assert calls == [("rotary", "pos", "q", "k", "cos_sin"), ("write", "k", "v", "kc", "vc", "slots")]


def test_kernels_with_unknown_names_are_refused_naming_the_contract(monkeypatch):
    module_name = _install_plugin(monkeypatch, "typo12", (1, 2))
    registry = Registry(builtin_modules=(module_name,), entry_point_group=None)
    runtime_cls = registry.plugins["typo12"].load
    monkeypatch.setattr(runtime_cls, KERNELS_CALL, lambda self: {"rmsnorm": lambda *a: None}, raising=False)
    with pytest.raises(PluginError, match=r"typo12.*rmsnorm.*rms_norm"):
        registry.load("typo12").kernels()


def test_newer_minor_plugin_loads_on_an_older_minor_host(monkeypatch):
    module_name = _install_plugin(monkeypatch, "ahead", (1, 13))
    backend = Registry(builtin_modules=(module_name,), entry_point_group=None).load("ahead")
    assert backend.runtime.contract_version == (1, 13)


def test_plugin_for_another_major_version_is_refused_at_registration(monkeypatch):
    module_name = _install_plugin(monkeypatch, "future", (2, 0))
    registry = Registry(builtin_modules=(module_name,), entry_point_group=None)
    assert "future" not in registry.plugins
    cause = registry.broken["future"].cause
    assert "2.0" in cause and "1.12" in cause
    with pytest.raises(PluginError, match=r"future.*2\.0.*1\.12"):
        registry.load("future")


def test_runtime_whose_version_contradicts_its_plugin_is_refused_at_load(monkeypatch):
    module_name = _install_plugin(monkeypatch, "liar", (1, 0), runtime_version=(2, 3))
    registry = Registry(builtin_modules=(module_name,), entry_point_group=None)
    assert "liar" in registry.plugins
    with pytest.raises(ContractVersionError, match=r"2\.3.*1\.12"):
        registry.load("liar")


def test_host_major_bump_refuses_plugins_of_the_old_major(monkeypatch):
    monkeypatch.setattr(version, "CONTRACT_VERSION", (2, 0))
    module_name = _install_plugin(monkeypatch, "stale", (1, 0))
    registry = Registry(builtin_modules=(module_name,), entry_point_group=None)
    assert "1.0" in registry.broken["stale"].cause and "2.0" in registry.broken["stale"].cause


def test_malformed_contract_version_is_refused_with_the_expected_shape(monkeypatch):
    module_name = _install_plugin(monkeypatch, "garbled", "1.0")
    registry = Registry(builtin_modules=(module_name,), entry_point_group=None)
    assert "(major, minor)" in registry.broken["garbled"].cause
    assert discovery.check_compatible("ok", (1, 0)) is None
