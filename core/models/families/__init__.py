"""The built-in model families, one module each (listed in :data:`..registry.BUILTIN_FAMILIES`)."""
