"""The ``cpu`` reference backend: virtual devices in host memory, for CI and machines without GPUs.

Memory comes from libc through cffi; each stream is a worker thread that runs its queue in order;
collectives run between the threads of one process. Settings (environment variables):

* ``ANYDEV_CPU_DEVICES``: number of virtual devices (default 8).
* ``ANYDEV_CPU_DEVICE_MEMORY``: capacity of each device, in bytes or with a unit such as ``4GiB``,
  ``512MiB`` (default 4 GiB).
* ``ANYDEV_CPU_COLLECTIVE_TIMEOUT``: seconds a collective waits for its peers before raising
  ``CollectiveTimeoutError`` (default 300).
"""

#: The backend's name, declared once: its plugin declares it, and the runtime carries it for messages
#: when built outside the registry (tests).
NAME = "cpu"
