"""The one error type every checkpoint problem is reported as."""
from __future__ import annotations

from ...plugin_api.errors import AnydevError


class ModelLoadError(AnydevError):
    """A model could not be loaded: a missing path, no weights, an unsupported architecture, a corrupt
    safetensors or GGUF header, a tokenizer that cannot be built. The message is one line that names
    the file or setting at fault and, where we know it, how to fix it."""
