"""The errors of ktune's Python client: one class per error code of the protocol
(docs/protocol.md, section Error codes), plus the client's own.

Every class derives from KtuneError, which carries `code` (the protocol's string), `message`
(for people: what was expected, what was found, where) and `details` (extra data, or None).

    try:
        daemon.tune("gemm", "M=64")
    except ktune_client.BadShape as e:
        print(e.code, e.message)       # bad_shape: shape 'M=64': dimension 'N' is missing ...
"""

from __future__ import annotations

from typing import Any, Optional

__all__ = [
    "KtuneError", "BadJson", "BadRequest", "UnsupportedVersion", "UnknownOp", "UnknownKernel",
    "SpecError", "BadShape", "BadDtype", "UnknownDevice", "Cancelled", "NoDevice", "UnknownJob",
    "EmptySpace", "SpaceTooLarge", "TooManyJobs", "MessageTooLarge", "Timeout", "IdleTimeout",
    "TooManyConnections", "PermissionDenied", "ShuttingDown", "StoreBusy", "Internal",
    "DaemonUnreachable", "CommandFailed", "NotSupported", "error_for",
]


class KtuneError(Exception):
    """An error answered by ktuned (its code and message) or found by the client."""

    code = "error"

    def __init__(self, code: str, message: str, details: Optional[Any] = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.details = details


class BadJson(KtuneError):
    """The request line was not JSON."""


class BadRequest(KtuneError):
    """A field is missing, of the wrong type or out of range (the message names it)."""


class UnsupportedVersion(KtuneError):
    """The request's protocol version is not 1."""


class UnknownOp(KtuneError):
    """ktuned does not know the op (an older daemon)."""


class UnknownKernel(KtuneError):
    """No family of that name in ktuned's kernel directories."""


class SpecError(KtuneError):
    """The family's kernel.toml does not load (file, key and expression named)."""


class BadShape(KtuneError):
    """The shape is unparsable or does not name the kernel's dimensions."""


class BadDtype(KtuneError):
    """The dtype is not one of the kernel's, or the device cannot run it."""


class UnknownDevice(KtuneError):
    """The device is neither cpu, cuda:N, all nor a fingerprint."""


class Cancelled(KtuneError):
    """The job the request waited for was cancelled or interrupted."""


class NoDevice(KtuneError):
    """The device cannot be used (no driver, no GPU, ...): the message says why."""


class UnknownJob(KtuneError):
    """No job with that id."""


class EmptySpace(KtuneError):
    """No config passes the constraints at this shape (or every one is quarantined)."""


class SpaceTooLarge(KtuneError):
    """The cartesian product of the params exceeds ktuned's enumeration limit."""


class TooManyJobs(KtuneError):
    """This uid has as many queued or running jobs as ktuned allows."""


class MessageTooLarge(KtuneError):
    """The request line exceeded ktuned's max_message_bytes (the connection was closed)."""


class Timeout(KtuneError):
    """A request line was not finished in time (the connection was closed)."""


class IdleTimeout(KtuneError):
    """The connection was idle too long and ktuned closed it."""


class TooManyConnections(KtuneError):
    """ktuned serves as many connections as it allows."""


class PermissionDenied(KtuneError):
    """This uid may not use ktuned, or may not make this change."""


class ShuttingDown(KtuneError):
    """ktuned is stopping."""


class StoreBusy(KtuneError):
    """ktuned's database takes no writes right now; nothing was started, try again."""


class Internal(KtuneError):
    """A daemon-side failure; the message says which."""


class DaemonUnreachable(KtuneError):
    """No ktuned answers at the socket (and none could be started)."""


class CommandFailed(KtuneError):
    """A ktune command the client ran (export, history, import of a file, daemon start) failed."""


class NotSupported(KtuneError):
    """What was asked has no equivalent in ktune (the message says what instead)."""


_BY_CODE: dict[str, type[KtuneError]] = {
    "bad_json": BadJson, "bad_request": BadRequest, "unsupported_version": UnsupportedVersion,
    "unknown_op": UnknownOp, "unknown_kernel": UnknownKernel, "spec_error": SpecError,
    "bad_shape": BadShape, "bad_dtype": BadDtype, "unknown_device": UnknownDevice,
    "cancelled": Cancelled, "no_device": NoDevice, "unknown_job": UnknownJob,
    "empty_space": EmptySpace, "space_too_large": SpaceTooLarge, "too_many_jobs": TooManyJobs,
    "message_too_large": MessageTooLarge, "timeout": Timeout, "idle_timeout": IdleTimeout,
    "too_many_connections": TooManyConnections, "permission_denied": PermissionDenied,
    "shutting_down": ShuttingDown, "store_busy": StoreBusy, "internal": Internal,
    "daemon_unreachable": DaemonUnreachable, "command_failed": CommandFailed,
    "not_supported": NotSupported,
}
for _code, _cls in _BY_CODE.items():
    _cls.code = _code


def error_for(code: str, message: str, details: Optional[Any] = None) -> KtuneError:
    """The exception of `code` (KtuneError itself for a code this client does not know)."""
    return _BY_CODE.get(code, KtuneError)(code, message, details)
