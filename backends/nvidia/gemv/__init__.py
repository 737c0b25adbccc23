"""Batch-1 GEMVs of the nvidia backend's own (``gemv.cu``), compiled with NVRTC at first use
(``nvrtc.py``) and launched through the CUDA driver (``driver.py``); ``kernel.py`` decides which calls
of ``quantized_linear`` they take."""
