"""``EngineConfig.quantization``'s values (no torch: command lines and their checks read them; the
quantizing is :mod:`.weights`')."""

#: ``quantization`` values: quantize per channel while loading (``fp8`` is ``fp8_e4m3``), or
#: dequantize GGUF blocks to the dtype on the device (the reference to compare with); None keeps what
#: is stored.
QUANTIZATIONS = {"int8": "int8", "fp8": "fp8_e4m3", "fp8_e4m3": "fp8_e4m3", "dequantize": None}
