"""The client: one mTLS connection to a gateway, and the calls that start from a binding."""

from __future__ import annotations

import time
from typing import Any, Callable, Sequence, TypeVar

import grpc

from execplane import _call
from execplane._call import DEFAULT_READY_TIMEOUT, new_operation_id
from execplane._proto.execution.v1 import execution_pb2 as pb
from execplane._proto.execution.v1 import service_pb2_grpc
from execplane.environment import Environment
from execplane.types import Owner

T = TypeVar("T")

# Bounds one call that names no timeout of its own (a file operation, a reference step): the
# server's work is bounded by the profile, so a call that takes longer is stuck, not slow.
DEFAULT_TIMEOUT = 30.0


class Client:
    """A connection to an execplane gateway over mutual TLS (TLS 1.3, the client's
    certificate required). Safe for concurrent use from threads; close it when done (or use
    it as a context manager).

    Retries follow the server: a call is retried only when the server marks the answer
    retryable (nothing was done), or — for reads and calls that carry an operation id — when
    the connection failed before an answer; every retry sends the same request, so the same
    operation id, and the server answers the first outcome instead of acting twice.
    ``OUTCOME_UNKNOWN`` is never retried.
    """

    def __init__(self, address: str, *, ca_file: str, cert_file: str, key_file: str, server_name: str = "",
                 max_attempts: int = 5, initial_backoff: float = 0.1, max_backoff: float = 3.0,
                 timeout: float = DEFAULT_TIMEOUT, interceptors: Sequence[grpc.UnaryUnaryClientInterceptor] = ()) -> None:
        with open(ca_file, "rb") as f:
            ca = f.read()
        with open(cert_file, "rb") as f:
            cert = f.read()
        with open(key_file, "rb") as f:
            key = f.read()
        creds = grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)
        options: list[tuple[str, Any]] = []
        if server_name:
            options.append(("grpc.ssl_target_name_override", server_name))
        channel = grpc.secure_channel(address, creds, options=options)
        self._channel = grpc.intercept_channel(channel, *interceptors) if interceptors else channel
        self._raw_channel = channel
        self.api = service_pb2_grpc.ExecutionProviderServiceStub(self._channel)
        self.retry = _call.RetryPolicy(max_attempts, initial_backoff, max_backoff)
        self.timeout = timeout
        self._closed = False

    def close(self) -> None:
        """Closes the connection; runs still held stop renewing (release them first)."""
        self._closed = True
        self._raw_channel.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, safety: _call.Safety, fn: Callable[..., T], request: Any, timeout: float | None = None) -> T:
        """One logical call of fn(request) within timeout (the client's when None)."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        return _call.call(self.retry, safety, deadline, lambda t: fn(request, timeout=t))

    def validate_profile(self, name: str, expected_digest: str = "") -> pb.ValidateProfileResponse:
        """The profile as the gateway has it loaded; fails (PreconditionMismatch) when
        expected_digest is given and differs."""
        return self.call(_call.Safety.IDEMPOTENT, self.api.ValidateProfile,
                         pb.ValidateProfileRequest(profile=name, expected_digest=expected_digest))

    def ensure(self, owner: Owner, binding_id: str, profile: str, *, expected_profile_digest: str = "",
               keep_reference_pending: bool = False, wait: bool = True, timeout: float = DEFAULT_READY_TIMEOUT) -> Environment:
        """The binding's environment, created on first use; identical concurrent calls yield
        one environment. Unless ``keep_reference_pending``, the binding's reference is
        committed; unless ``wait`` is false, waits until the environment is Ready."""
        deadline = time.monotonic() + timeout
        req = pb.EnsureEnvironmentRequest(operation_id=new_operation_id(), owner=owner.proto(), binding_id=binding_id,
                                          profile=profile, expected_profile_digest=expected_profile_digest)
        resp = self.call(_call.Safety.IDEMPOTENT, self.api.EnsureEnvironment, req, timeout=self.timeout)
        env = Environment(self, owner, binding_id, resp.environment, resp.environment_grant)
        env.created = resp.created
        if not keep_reference_pending and env.reference_state() == pb.REFERENCE_STATE_PENDING_CREATE:
            env.commit_reference()
        if wait:
            env.wait_ready(timeout=max(deadline - time.monotonic(), 0.0))
        return env

    def attach(self, owner: Owner, binding_id: str, environment_id: str, revision: str) -> Environment:
        """A handle on an existing environment of the binding, as the platform recorded it.
        Absent, re-created (another revision) or not the owner's: NotFound."""
        env = Environment(self, owner, binding_id, pb.Environment(ref=pb.EnvironmentRef(id=environment_id, revision=revision)), None)
        env.refresh()
        return env
