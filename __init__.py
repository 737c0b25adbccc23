"""anydev: a hardware-portable backend plugin layer for LLM inference.

``anydev.plugin_api`` is the device-API contract, ``anydev.backends`` the built-in backends,
``anydev.core`` the inference engine, ``anydev.conformance`` the conformance suite.
"""
__version__ = "0.1.0"
