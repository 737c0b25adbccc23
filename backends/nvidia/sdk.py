"""The CUDA toolkit's folders the nvidia backend searches for its libraries (libcudart and NCCL in
``spec.py``, libnvrtc in ``gemv/nvrtc.py``): after each library's own variable, before torch's CUDA
wheels and the dynamic loader's path."""
from anydev.backends.cudalike.library import EnvRoot, FixedRoot

SDK_ROOTS = (EnvRoot("CUDA_HOME"), EnvRoot("CUDA_PATH"), FixedRoot("/usr/local/cuda"))
LIB_SUBDIRS = ("lib64", "lib")
