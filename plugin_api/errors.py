"""Typed errors raised at anydev's boundaries.

Every error says what went wrong and, where we know it, how to fix it. Vendors raise these from
their backends (the CUDA-like backends through the one checker in `anydev.backends.cudalike.check`), so that callers can
catch one type whatever the hardware.
"""
from __future__ import annotations


class AnydevError(Exception):
    """Base class of every error anydev raises on purpose."""


class BackendUnavailableError(AnydevError):
    """The backend's runtime cannot be used here: a library is missing, or no device is present.

    ``searched`` lists what was tried (library names, paths, environment variables) so the message can
    tell the user where to point anydev.
    """

    def __init__(self, backend: str, reason: str, searched: list[str] | None = None):
        self.backend = backend
        self.reason = reason
        self.searched = list(searched or [])
        message = f"backend '{backend}' is unavailable: {reason}"
        if self.searched:
            message += " (searched: " + "; ".join(self.searched) + ")"
        super().__init__(message)


class RuntimeCallError(AnydevError):
    """A vendor runtime or collective-library call returned an error code.

    Carries the backend, the call's name, the numeric code and the runtime's own error name and message.
    """

    def __init__(self, backend: str, call: str, code: int, name: str, message: str):
        self.backend = backend
        self.call = call
        self.code = code
        self.error_name = name
        self.error_message = message
        super().__init__(f"{backend}: {call} failed with {name} ({code}): {message}")


class OutOfMemoryError(RuntimeCallError):
    """An allocation did not fit in the device's (or host's) free memory."""


class ClosedError(AnydevError):
    """An object (buffer, stream, event, communicator, backend) was used after ``close()``."""

    def __init__(self, what: str):
        super().__init__(f"{what} is closed; create a new one instead of reusing it")


class InvalidArgumentError(AnydevError, ValueError):
    """A caller passed a bad argument: a size out of range, a wrong dtype, a buffer of another device."""


class NotSupportedError(AnydevError, NotImplementedError):
    """The backend does not provide an optional call of the contract (see ``Backend.supports``)."""


class PluginError(AnydevError):
    """A backend plugin failed to load or register."""


class ContractVersionError(PluginError):
    """A plugin implements a contract version this anydev cannot use."""


class UnknownBackendError(AnydevError, LookupError):
    """A backend was asked for by a name no plugin registered."""

    def __init__(self, name: str, known: list[str], named_by: str = ""):
        self.name = name
        self.known = sorted(known)
        super().__init__(
            f"unknown backend '{name}'{f' (named by {named_by})' if named_by else ''}; known backends: {', '.join(self.known) or '(none)'}"
            " (run `anydev list-backends` for details)"
        )


class CollectiveTimeoutError(AnydevError, TimeoutError):
    """A collective's peers did not arrive in time (a rank failed or never called it)."""


class CollectiveAbortedError(AnydevError):
    """A collective, send or recv ended because its communicator was aborted (``Communicator.abort``,
    the contract's ``comm_abort``), or was called on an aborted communicator. The group is unusable:
    destroy its communicators and create new ones."""
