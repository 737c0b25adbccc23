"""Registration: the module named by this package's entry point in the group ``anydev.backends``.

The hook must be cheap and must not touch the runtime: anydev calls it for every installed plugin
(``anydev list-backends``), and builds the runtime only when someone asks for ``hostdev``.
"""
from anydev.plugin_api import BackendPlugin, hookimpl

#: The backend's name and the contract version this package was written against (anydev refuses
#: another major version), declared here once: anydev sets both on the runtime it loads (contract 1.6).
NAME = "hostdev"
CONTRACT_VERSION = (1, 6)


def load_runtime():
    # Imported here so that discovering the plugin never loads libraries or starts threads.
    from .runtime import HostDevRuntime

    return HostDevRuntime()


@hookimpl
def anydev_backends():
    return [
        BackendPlugin(
            name=NAME,
            contract_version=CONTRACT_VERSION,
            load=load_runtime,
            description="example out-of-tree backend: virtual devices over host memory (anydev-hostdev)",
        )
    ]
