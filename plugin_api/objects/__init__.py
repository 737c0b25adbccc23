"""The objects users hold: Backend → Device → buffers, streams, events; communicators.

They wrap a :class:`~anydev.plugin_api.runtime.DeviceRuntime` once for every backend, so that argument
checks, ownership and ``close()`` behave the same on every card. Each object comes from a factory
(``backend.device(0).create_stream()``); ``close()`` is safe to call twice; any other use after close
raises :class:`ClosedError`. ``Buffer.free()`` is the explicit free: a second ``free()`` raises.

One module per concept: :mod:`.device` (Backend, Device), :mod:`.memory` (DeviceBuffer, HostBuffer),
:mod:`.stream`, :mod:`.event`, :mod:`.graph`, :mod:`.communicator`; :mod:`.closable` holds the shared
``close()`` rules.
"""
from .closable import Closable
from .communicator import Communicator
from .device import Backend, Device
from .event import Event
from .graph import Graph
from .memory import DeviceBuffer, HostBuffer, host_array, host_span
from .stream import Stream

__all__ = ["Backend", "Closable", "Communicator", "Device", "DeviceBuffer", "Event", "Graph", "HostBuffer",
           "Stream", "host_array", "host_span"]
