"""The nvidia backend's pluggy hook: the same hook a third-party backend implements."""
from anydev.backends.cudalike.plugin import backend_plugin
from anydev.plugin_api import hookimpl

from .spec import SPEC


@hookimpl
def anydev_backends():
    return [backend_plugin(SPEC)]
