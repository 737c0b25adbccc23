"""The one place where status codes of a CUDA-like runtime and its collective library become errors.

Callers keep the hot path to one comparison::

    code = self._event_record(event, stream)
    if code:
        raise self.check.runtime_error("cudaEventRecord", code)

and everything else (names, messages, out-of-memory mapping) happens here, only on failure.
"""
from __future__ import annotations

from typing import Callable

from anydev.plugin_api.errors import OutOfMemoryError, RuntimeCallError

#: NCCL's result names by code [V for NCCL 2.2x]; MCCL is assumed to keep them [U].
CCL_RESULT_NAMES = {
    0: "Success", 1: "UnhandledCudaError", 2: "SystemError", 3: "InternalError", 4: "InvalidArgument",
    5: "InvalidUsage", 6: "RemoteError", 7: "InProgress",
}
#: Error names that mean "the allocation did not fit" (CUDA/MUSA spelling, HIP/MACA spelling).
OOM_NAME_SUFFIXES = ("ErrorMemoryAllocation", "ErrorOutOfMemory")
#: CUDA's ``cudaErrorMemoryAllocation``; used only when the runtime cannot name its errors.
OOM_CODE = 2

CodeText = Callable[[int], str]


class Checker:
    """Builds typed errors for one backend.

    ``error_name`` is the runtime's ``{rt}GetErrorName`` as a code→str function, or None when the
    runtime lacks it (MACA): then the error string stands in for the name.
    """

    def __init__(self, backend: str, ccl_prefix: str, error_string: CodeText, error_name: CodeText | None,
                 ccl_error_string: CodeText):
        self.backend = backend
        self.ccl_prefix = ccl_prefix
        self.error_string = error_string
        self.error_name_function = error_name
        self.ccl_error_string = ccl_error_string

    def error_name(self, code: int) -> str:
        if self.error_name_function is None:
            return self.error_string(code)
        return self.error_name_function(code)

    def runtime_error(self, call: str, code: int) -> RuntimeCallError:
        """The error for runtime call ``call`` returning ``code`` (OutOfMemoryError for allocations)."""
        name, message = self.error_name(code), self.error_string(code)
        is_oom = name.endswith(OOM_NAME_SUFFIXES) or (self.error_name_function is None and code == OOM_CODE)
        error_type = OutOfMemoryError if is_oom else RuntimeCallError
        return error_type(self.backend, call, code, name, message)

    def ccl_error(self, call: str, code: int) -> RuntimeCallError:
        """The error for collective-library call ``call`` returning ``code``."""
        name = self.ccl_prefix + CCL_RESULT_NAMES.get(code, f"Result{code}")
        return RuntimeCallError(self.backend, call, code, name, self.ccl_error_string(code))

    def runtime(self, call: str, code: int) -> None:
        """Raise the error for a nonzero ``code`` of runtime call ``call``."""
        if code:
            raise self.runtime_error(call, code)

    def ccl(self, call: str, code: int) -> None:
        """Raise the error for a nonzero ``code`` of collective call ``call``."""
        if code:
            raise self.ccl_error(call, code)

    def find_code(self, name_suffix: str, phrase: str, candidates) -> int | None:
        """The first candidate code whose error name ends with ``name_suffix`` (or, without an
        error-name function, whose error string contains ``phrase``); None when none does.

        Used at load time for codes whose number a vendor does not publish (e.g. "not ready").
        """
        for code in candidates:
            if self.error_name_function is not None:
                if self.error_name_function(code).endswith(name_suffix):
                    return code
            elif phrase in self.error_string(code).lower():
                return code
        return None
