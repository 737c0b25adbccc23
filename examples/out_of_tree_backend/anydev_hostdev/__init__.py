"""anydev-hostdev: an example out-of-tree anydev backend.

It turns host memory into ``ANYDEV_HOSTDEV_DEVICES`` virtual devices, each one region of libc memory
handed out by its own allocator, with streams run by worker threads and in-process collectives. It
is the template for vendors: see ``plugin.py`` (registration) and ``runtime.py`` (the contract).
"""
__version__ = "0.1.0"
