"""Reading a refusal: the ErrorInfo the gateway attaches, decoded into the class named after
its reason (no cluster: the bytes are built here as the gateway's grpc-go encodes them)."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf import any_pb2

from execplane import _call, errors
from execplane._proto.rpc import status_pb2


class _Refusal(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode, message: str, info: status_pb2.ErrorInfo | None, request_id: str = "r-1") -> None:
        self._code, self._message, self._info, self._request_id = code, message, info, request_id

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._message

    def trailing_metadata(self):  # type: ignore[no-untyped-def]
        md = []
        if self._info is not None:
            st = status_pb2.Status(code=self._code.value[0], message=self._message)
            st.details.append(any_pb2.Any(type_url="type.googleapis.com/google.rpc.ErrorInfo", value=self._info.SerializeToString()))
            md.append(("grpc-status-details-bin", st.SerializeToString()))
        return tuple(md)

    def initial_metadata(self):  # type: ignore[no-untyped-def]
        return (("x-request-id", self._request_id),)


def _info(reason: str, retryable: bool, domain: str = "execplane.dev", **metadata: str) -> status_pb2.ErrorInfo:
    return status_pb2.ErrorInfo(reason=reason, domain=domain, metadata={"retryable": "true" if retryable else "false", **metadata})


@pytest.mark.parametrize("code,reason,cls,coarse", [
    (grpc.StatusCode.ABORTED, "VERSION_MISMATCH", errors.VersionMismatch, errors.Conflict),
    (grpc.StatusCode.ABORTED, "STALE_EPOCH", errors.StaleEpoch, errors.Conflict),
    (grpc.StatusCode.ABORTED, "RUN_CLAIM_HELD", errors.RunClaimHeld, errors.Conflict),
    (grpc.StatusCode.FAILED_PRECONDITION, "FENCED", errors.Fenced, errors.FailedPrecondition),
    (grpc.StatusCode.PERMISSION_DENIED, "PATH_ESCAPE", errors.PathEscape, errors.PermissionDenied),
    (grpc.StatusCode.UNAUTHENTICATED, "GRANT_INVALID", errors.GrantInvalid, errors.Unauthenticated),
    (grpc.StatusCode.NOT_FOUND, "NOT_FOUND", errors.NotFound, errors.NotFound),
    (grpc.StatusCode.RESOURCE_EXHAUSTED, "QUOTA_EXCEEDED", errors.QuotaExceeded, errors.Exhausted),
    (grpc.StatusCode.UNKNOWN, "OUTCOME_UNKNOWN", errors.OutcomeUnknown, errors.ExecplaneError),
])
def test_reason_names_the_class(code: grpc.StatusCode, reason: str, cls: type, coarse: type) -> None:
    err = errors.from_rpc_error(_Refusal(code, "refused", _info(reason, False)))
    assert type(err) is cls and isinstance(err, coarse)
    assert (err.code, err.reason, err.message, err.retryable, err.request_id) == (code, reason, "refused", False, "r-1")
    assert str(err) == f"execplane: {code.name}/{reason}: refused (request r-1)"
    assert err.metadata == {}  # "retryable" is the flag, not metadata


def test_quota_exceeded_names_the_quota() -> None:
    assert errors.error_class(grpc.StatusCode.RESOURCE_EXHAUSTED, "QUOTA_EXCEEDED") is errors.QuotaExceeded
    assert issubclass(errors.QuotaExceeded, errors.Exhausted)
    info = _info("QUOTA_EXCEEDED", False, quota="readyEnvironments", scope="owner", limit="2", used="2")
    err = errors.from_rpc_error(_Refusal(grpc.StatusCode.RESOURCE_EXHAUSTED, "the owner quota readyEnvironments (limit 2, in use 2)", info))
    assert type(err) is errors.QuotaExceeded and isinstance(err, errors.Exhausted) and not err.retryable
    assert err.metadata == {"quota": "readyEnvironments", "scope": "owner", "limit": "2", "used": "2"}
    # Not retried: the same call fails again until the use falls.
    attempts = []

    def fail(timeout: float | None) -> None:
        attempts.append(timeout)
        raise _Refusal(grpc.StatusCode.RESOURCE_EXHAUSTED, "quota", info)

    with pytest.raises(errors.QuotaExceeded) as raised:
        _call.call(_call.RetryPolicy(attempts=5, initial=0.0, ceiling=0.0), _call.Safety.SERVER_SAYS_SO, None, fail)
    assert len(attempts) == 1 and raised.value.metadata["quota"] == "readyEnvironments"
    # Built without metadata (as the SDK builds its own errors), it is empty.
    assert errors.new_error(grpc.StatusCode.RESOURCE_EXHAUSTED, "QUOTA_EXCEEDED", "x").metadata == {}


def test_foreign_or_missing_details() -> None:
    # Another domain's ErrorInfo is not ours to read; no details at all is a transport failure.
    other = errors.from_rpc_error(_Refusal(grpc.StatusCode.ABORTED, "x", _info("VERSION_MISMATCH", True, domain="example.com")))
    assert type(other) is errors.Conflict and other.reason == "" and not other.retryable and other.metadata == {}
    bare = errors.from_rpc_error(_Refusal(grpc.StatusCode.UNAVAILABLE, "connection refused", None))
    assert type(bare) is errors.Unavailable and bare.reason == ""


def test_retries_follow_the_server() -> None:
    policy = _call.RetryPolicy(attempts=5, initial=0.0, ceiling=0.0)
    for safety, refusal, want_attempts in [
        (_call.Safety.SERVER_SAYS_SO, _Refusal(grpc.StatusCode.RESOURCE_EXHAUSTED, "slow down", _info("LIMIT_EXCEEDED", True)), 5),
        (_call.Safety.SERVER_SAYS_SO, _Refusal(grpc.StatusCode.UNAVAILABLE, "reset", None), 1),  # a write may have landed
        (_call.Safety.IDEMPOTENT, _Refusal(grpc.StatusCode.UNAVAILABLE, "reset", None), 5),
        (_call.Safety.IDEMPOTENT, _Refusal(grpc.StatusCode.ABORTED, "lost", _info("VERSION_MISMATCH", False)), 1),
        (_call.Safety.IDEMPOTENT, _Refusal(grpc.StatusCode.UNKNOWN, "broke", _info("OUTCOME_UNKNOWN", False)), 1),
    ]:
        attempts = []

        def fail(timeout: float | None, refusal: _Refusal = refusal) -> None:
            attempts.append(timeout)
            raise refusal

        with pytest.raises(errors.ExecplaneError):
            _call.call(policy, safety, None, fail)
        assert len(attempts) == want_attempts, (safety, refusal.details())


def test_a_write_cut_short_here_is_outcome_unknown() -> None:
    def cut(timeout: float | None) -> None:
        raise _Refusal(grpc.StatusCode.DEADLINE_EXCEEDED, "deadline exceeded", None)

    with pytest.raises(errors.OutcomeUnknown):
        _call.call(_call.RetryPolicy(), _call.Safety.SERVER_SAYS_SO, None, cut)
