"""The execplane API's answers that are not success, as exception classes.

Every failed call raises an :class:`ExecplaneError` (or a subclass named after the API's
reason): ``code`` is the gRPC status code, ``reason`` the machine-readable reason
(``"VERSION_MISMATCH"``, ``"STALE_EPOCH"``, …; empty for a transport failure), ``retryable``
the server's statement that nothing was done and the same call may succeed later, and
``request_id`` the gateway's id for the operator's logs, and ``metadata`` what the answer says
beside its reason (for ``QUOTA_EXCEEDED``: ``quota``, ``scope``, ``limit``, ``used``). The classes are the Go SDK's
(``client.ErrVersionMismatch`` is :class:`VersionMismatch`, and so on): catch the fine class
for the decision, the coarse one (:class:`Conflict`, …) for a family.
"""

from __future__ import annotations

import grpc

from execplane._proto.rpc import status_pb2

# The ErrorInfo the gateway attaches to every refusal (pkg/apierror).
_ERROR_INFO_TYPE = "google.rpc.ErrorInfo"
_DOMAIN = "execplane.dev"
_STATUS_DETAILS_KEY = "grpc-status-details-bin"
_REQUEST_ID_KEY = "x-request-id"


class ExecplaneError(Exception):
    """An answer of the execplane API that is not success."""

    def __init__(self, code: grpc.StatusCode, reason: str, message: str, *, retryable: bool = False, request_id: str = "",
                 metadata: dict[str, str] | None = None) -> None:
        self.code = code
        self.reason = reason
        self.message = message
        self.retryable = retryable
        self.request_id = request_id
        # The ErrorInfo's metadata beside "retryable": for QUOTA_EXCEEDED the quota ("quota"),
        # its scope ("client" or "owner"), "limit" and "used" (decimal strings).
        self.metadata: dict[str, str] = dict(metadata) if metadata else {}
        super().__init__(str(self))

    def __str__(self) -> str:
        s = f"execplane: {self.code.name}"
        if self.reason:
            s += "/" + self.reason
        if self.message:
            s += ": " + self.message
        if self.request_id:
            s += f" (request {self.request_id})"
        return s


# Coarse classes, by gRPC code.
class InvalidArgument(ExecplaneError):
    """The request was malformed (INVALID_ARGUMENT)."""


class Unauthenticated(ExecplaneError):
    """The caller or a grant was not recognised (UNAUTHENTICATED)."""


class PermissionDenied(ExecplaneError):
    """The caller may not do this (PERMISSION_DENIED)."""


class NotFound(ExecplaneError):
    """Absent, or not yours: the two are indistinguishable by design (NOT_FOUND)."""


class AlreadyExists(ExecplaneError):
    """The object exists (ALREADY_EXISTS)."""


class Conflict(ExecplaneError):
    """Any ABORTED answer: a compare-and-swap lost, a stale epoch, a revoked grant, a version
    mismatch, a precondition mismatch, a run claim held by another."""


class FailedPrecondition(ExecplaneError):
    """The environment is not in a state for this (FAILED_PRECONDITION)."""


class Exhausted(ExecplaneError):
    """A rate, concurrency, size or capacity limit (RESOURCE_EXHAUSTED)."""


class Unavailable(ExecplaneError):
    """The gateway, its security material or the controller leader is unavailable for now."""


class Unimplemented(ExecplaneError):
    """The gateway does not offer this call (UNIMPLEMENTED)."""


class Internal(ExecplaneError):
    """A fault on the server (INTERNAL)."""


# Fine classes, by reason.
class GrantInvalid(Unauthenticated):
    """The grant expired, was revoked by rotation, or is not this environment's."""


class PathEscape(PermissionDenied):
    """The path leads outside the workspace."""


class StaleEpoch(Conflict):
    """The run claim was superseded: another Acquire fenced this one."""


class Revoked(Conflict):
    """Every grant of the environment was revoked."""


class VersionMismatch(Conflict):
    """The file's version is not the expected one (a compare-and-swap write lost)."""


class RunClaimHeld(Conflict):
    """Another run holds the environment's claim."""


class OperationIdReused(Conflict):
    """The operation id was used before with different arguments."""


class PreconditionMismatch(Conflict):
    """An administrative precondition (epoch, Pod UID, digest) did not hold."""


class Fenced(FailedPrecondition):
    """The environment's last outcome is unproven; an administrator must recover it."""


class NotReady(FailedPrecondition):
    """The environment is not ready (provisioning, suspending, retired, …)."""


class WrongType(FailedPrecondition):
    """A file operation met the wrong kind of object (a directory for a file, …)."""


class QuotaExceeded(Exhausted):
    """An operator's quota of the client or the owner (QUOTA_EXCEEDED): the same call fails
    again until the use falls (an environment deleted, a window passed), so it is not retried.
    ``metadata`` names it: ``quota`` (``"environments"``, ``"readyEnvironments"``,
    ``"storage"``, ``"detachedCommands"``, ``"cpuCoreHours"``, ``"memoryGiBHours"``, …),
    ``scope`` (``"client"`` or ``"owner"``), ``limit`` and ``used`` (decimal strings)."""


class RecordUnverified(ExecplaneError):
    """A durable command's record is not the one its supervisor wrote (the workload altered
    or planted it): nothing was done on its account."""


class OutcomeUnknown(ExecplaneError):
    """The call broke after it was sent: a write may have landed, a command may have run.
    Never retried: read the state and decide."""


_BY_CODE: dict[grpc.StatusCode, type[ExecplaneError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExists,
    grpc.StatusCode.ABORTED: Conflict,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.RESOURCE_EXHAUSTED: Exhausted,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.UNIMPLEMENTED: Unimplemented,
    grpc.StatusCode.INTERNAL: Internal,
}

_BY_REASON: dict[str, type[ExecplaneError]] = {
    "GRANT_INVALID": GrantInvalid,
    "PATH_ESCAPE": PathEscape,
    "STALE_EPOCH": StaleEpoch,
    "REVOKED": Revoked,
    "VERSION_MISMATCH": VersionMismatch,
    "RUN_CLAIM_HELD": RunClaimHeld,
    "OPERATION_ID_REUSED": OperationIdReused,
    "PRECONDITION_MISMATCH": PreconditionMismatch,
    "FENCED": Fenced,
    "NOT_READY": NotReady,
    "WRONG_TYPE": WrongType,
    "QUOTA_EXCEEDED": QuotaExceeded,
    "OUTCOME_UNKNOWN": OutcomeUnknown,
    "RECORD_UNVERIFIED": RecordUnverified,
}


def error_class(code: grpc.StatusCode, reason: str) -> type[ExecplaneError]:
    """The most specific class of an answer."""
    return _BY_REASON.get(reason) or _BY_CODE.get(code, ExecplaneError)


def new_error(code: grpc.StatusCode, reason: str, message: str, *, retryable: bool = False, request_id: str = "",
              metadata: dict[str, str] | None = None) -> ExecplaneError:
    """An error of the class the code and reason name."""
    return error_class(code, reason)(code, reason, message, retryable=retryable, request_id=request_id, metadata=metadata)


def from_rpc_error(err: grpc.RpcError) -> ExecplaneError:
    """Reads a failed call: its status, the ErrorInfo the gateway attached (reason, the
    retryable flag and the rest of its metadata) and the request id."""
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    message = err.details() if hasattr(err, "details") else str(err)
    reason, retryable, request_id, metadata = "", False, "", {}
    for md in (_metadata(err, "trailing_metadata"), _metadata(err, "initial_metadata")):
        for key, value in md:
            if key == _STATUS_DETAILS_KEY and isinstance(value, bytes):
                reason, retryable, metadata = _error_info(value) or (reason, retryable, metadata)
            elif key == _REQUEST_ID_KEY and not request_id:
                request_id = value if isinstance(value, str) else value.decode()
    return new_error(code, reason, message or "", retryable=retryable, request_id=request_id, metadata=metadata)


def _metadata(err: grpc.RpcError, name: str) -> tuple:
    fn = getattr(err, name, None)
    try:
        return tuple(fn() or ()) if fn else ()
    except Exception:  # a call that never started has no metadata
        return ()


def _error_info(details: bytes) -> tuple[str, bool, dict[str, str]] | None:
    """The reason, the retryable flag and the other metadata of the execplane ErrorInfo in a
    serialized google.rpc.Status; None when there is none."""
    st = status_pb2.Status()
    try:
        st.ParseFromString(details)
    except Exception:
        return None
    for any_ in st.details:
        if any_.type_url.rsplit("/", 1)[-1] != _ERROR_INFO_TYPE:
            continue
        info = status_pb2.ErrorInfo()
        try:
            info.ParseFromString(any_.value)
        except Exception:
            return None
        if info.domain == _DOMAIN:
            metadata = {k: v for k, v in info.metadata.items() if k != "retryable"}
            return info.reason, info.metadata.get("retryable") == "true", metadata
    return None
