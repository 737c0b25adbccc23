"""The binding core shared by the CUDA-like backends (nvidia, moore, metax).

``cdefs.py`` holds the C declarations, ``library.py`` finds the libraries, ``check.py`` turns status
codes into typed errors, ``runtime.py`` is the DeviceRuntime, ``spec.py`` the per-vendor data that a
vendor folder fills in, ``torch_bridge.py`` the torch glue of ``cuda``-device torch builds.
"""
