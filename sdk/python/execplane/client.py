"""The client: one mTLS connection to a gateway, and the calls that start from a binding."""

from __future__ import annotations

import datetime
import time
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence, TypeVar

import grpc

from execplane import _call
from execplane._call import DEFAULT_READY_TIMEOUT, new_operation_id
from execplane._proto.execution.v1 import execution_pb2 as pb
from execplane._proto.execution.v1 import service_pb2_grpc
from execplane.environment import Environment
from execplane.types import Deadline, Owner

T = TypeVar("T")

# Bounds one call that names no timeout of its own (a file operation, a reference step): the
# server's work is bounded by the profile, so a call that takes longer is stuck, not slow.
DEFAULT_TIMEOUT = 30.0
# ListEnvironments' page bound (the server's): a page of environments with their metadata
# stays within one gRPC message.
MAX_PAGE_SIZE = 500
# ListUsage's page bound (the server's): a record is some 150 bytes on the wire.
MAX_USAGE_PAGE_SIZE = 1000


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
               metadata: Mapping[str, str] | None = None, deadline: Deadline | None = None,
               keep_reference_pending: bool = False, wait: bool = True, timeout: float = DEFAULT_READY_TIMEOUT,
               from_snapshot: str = "") -> Environment:
        """The binding's environment, created on first use; identical concurrent calls yield
        one environment. Unless ``keep_reference_pending``, the binding's reference is
        committed; unless ``wait`` is false, waits until the environment is Ready.

        ``metadata`` (at most 32 entries: identifier keys of at most 64 bytes, values of at
        most 512, 4 KiB in all) is a new environment's, returned in ``status.metadata`` and
        matched by ``list_environments``; it is part of the request, like the profile: the
        binding ensured again with other metadata is AlreadyExists. ``deadline`` is a new
        environment's, set in the same write as the binding's reference; a later ensure
        leaves it as it is (``Environment.set_deadline`` moves it). ``from_snapshot`` names one
        of the owner's READY snapshots that a new environment's workspace starts as (part of
        the request); another owner's is NotFound."""
        deadline_at = time.monotonic() + timeout
        req = pb.EnsureEnvironmentRequest(operation_id=new_operation_id(), owner=owner.proto(), binding_id=binding_id,
                                          profile=profile, expected_profile_digest=expected_profile_digest,
                                          metadata=dict(metadata or {}), from_snapshot=from_snapshot)
        if deadline is not None:
            req.deadline.CopyFrom(deadline.proto())
        resp = self.call(_call.Safety.IDEMPOTENT, self.api.EnsureEnvironment, req, timeout=self.timeout)
        env = Environment(self, owner, binding_id, resp.environment, resp.environment_grant)
        env.created = resp.created
        if not keep_reference_pending and env.reference_state() == pb.REFERENCE_STATE_PENDING_CREATE:
            env.commit_reference()
        if wait:
            env.wait_ready(timeout=max(deadline_at - time.monotonic(), 0.0))
        return env

    def attach(self, owner: Owner, binding_id: str, environment_id: str, revision: str) -> Environment:
        """A handle on an existing environment of the binding, as the platform recorded it.
        Absent, re-created (another revision) or not the owner's: NotFound."""
        env = Environment(self, owner, binding_id, pb.Environment(ref=pb.EnvironmentRef(id=environment_id, revision=revision)), None)
        env.refresh()
        return env

    def list_environments(self, owner: Owner, binding_id: str | None = None, lifecycle: Iterable[int | str] | None = None,
                          metadata: Mapping[str, str] | None = None, page_size: int = 0) -> Iterator[pb.Environment]:
        """The environments this client created for owner, ordered by id (deleted ones are
        never listed), fetched page by page as the iteration reaches them: only
        ``binding_id``'s; only those in one of the ``lifecycle`` states (names such as
        ``"READY"`` or ``"SUSPENDED"``, or ``LifecycleState`` values); only those whose
        metadata has every entry of ``metadata``. ``page_size`` is the server's page (0: its
        default of 100). Requires the client to be allowed to attest owners."""
        if not 0 <= page_size <= MAX_PAGE_SIZE:
            raise ValueError(f"page size {page_size}: want 0..{MAX_PAGE_SIZE}")
        # Built here, not in the generator, so that a bad argument fails at the call.
        first = pb.ListEnvironmentsRequest(owner=owner.proto(), binding_id=binding_id or "",
                                           lifecycle=[_lifecycle_state(s) for s in lifecycle or ()],
                                           metadata=dict(metadata or {}), page_size=page_size)
        return self._pages(first)

    def get_snapshot(self, owner: Owner, name: str) -> pb.Snapshot:
        """One of the owner's snapshots (GetSnapshot); another owner's is NotFound, as an
        absent one."""
        return self.call(_call.Safety.IDEMPOTENT, self.api.GetSnapshot, pb.GetSnapshotRequest(owner=owner.proto(), name=name)).snapshot

    def list_snapshots(self, owner: Owner) -> list[pb.Snapshot]:
        """The owner's snapshots (this client's), by name (ListSnapshots)."""
        return list(self.call(_call.Safety.IDEMPOTENT, self.api.ListSnapshots, pb.ListSnapshotsRequest(owner=owner.proto())).snapshots)

    def delete_snapshot(self, owner: Owner, name: str) -> pb.Snapshot:
        """Deletes one of the owner's snapshots and its storage (DeleteSnapshot); environments
        restored from it keep their files."""
        req = pb.DeleteSnapshotRequest(operation_id=new_operation_id(), owner=owner.proto(), name=name)
        return self.call(_call.Safety.IDEMPOTENT, self.api.DeleteSnapshot, req).snapshot

    def get_usage(self, environment_id: str, revision: str = "", *, start: datetime.datetime | None = None,
                  end: datetime.datetime | None = None, granularity: int | str = 0) -> pb.GetUsageResponse:
        """An environment's usage ledger (GetUsage): its totals since creation (``totals``, as
        of ``as_of``) and its windows in [start, end) that have usage, oldest first, each
        ``closed`` once nothing more will be added to it. ``revision`` names the incarnation
        (the current one when empty; a deleted environment's ledger is kept for the
        retention period and named by its revision). ``start`` and ``end`` are timezone-aware
        datetimes, cut by the server to whole windows (unset: the oldest kept window, and
        now); ``granularity`` is ``"HOUR"`` (the default), ``"DAY"`` (UTC days) or
        ``"TOTAL"`` (one window: the whole range), or a ``UsageGranularity`` value. For the
        client that created the environment, or an administrator of it; any other gets
        NotFound."""
        req = pb.GetUsageRequest(environment=pb.EnvironmentRef(id=environment_id, revision=revision),
                                 granularity=_usage_enum(pb.UsageGranularity, "USAGE_GRANULARITY_", granularity))
        _set_range(req, start, end)
        return self.call(_call.Safety.IDEMPOTENT, self.api.GetUsage, req)

    def list_usage(self, *, owner: Owner | None = None, binding_id: str | None = None, client: str = "",
                   all_clients: bool = False, start: datetime.datetime | None = None, end: datetime.datetime | None = None,
                   granularity: int | str = 0, group_by: int | str = 0, page_size: int = 0) -> Iterator[pb.UsageRecord]:
        """Usage summed per window and group (ListUsage), a generator over ``UsageRecord``
        messages ordered by key, then window start, fetching each page as the iteration
        reaches it. Grouped by ``group_by``: ``"ENVIRONMENT"`` (the default), ``"BINDING"``,
        ``"OWNER"``, ``"CLIENT"`` or ``"NONE"`` (everything summed), or a ``UsageGroupBy``
        value; a record carries the key fields of its grouping. In scope: the client's own
        environments — only ``owner``'s when given (the client must be allowed to attest
        owners), only ``binding_id``'s when given; administrators may name another
        ``client`` (its identity) or take ``all_clients`` they administer, not both.
        ``start``, ``end`` and ``granularity`` as in ``get_usage``; ``page_size`` is the
        server's page (0: its default of 500; at most 1000). Arguments out of bounds raise
        ValueError here, before any call."""
        if not 0 <= page_size <= MAX_USAGE_PAGE_SIZE:
            raise ValueError(f"page size {page_size}: want 0..{MAX_USAGE_PAGE_SIZE}")
        if client and all_clients:
            raise ValueError("client and all_clients exclude each other")
        first = pb.ListUsageRequest(binding_id=binding_id or "", client=client, all_clients=all_clients,
                                    granularity=_usage_enum(pb.UsageGranularity, "USAGE_GRANULARITY_", granularity),
                                    group_by=_usage_enum(pb.UsageGroupBy, "USAGE_GROUP_BY_", group_by), page_size=page_size)
        if owner is not None:
            first.owner.CopyFrom(owner.proto())
        _set_range(first, start, end)
        return self._usage_pages(first)

    def _usage_pages(self, first: pb.ListUsageRequest) -> Iterator[pb.UsageRecord]:
        req = first
        while True:
            # Each page's request is its own, so every retry of a page sends it unchanged.
            resp = self.call(_call.Safety.IDEMPOTENT, self.api.ListUsage, req)
            yield from resp.records
            if not resp.next_page_token:
                return
            req = pb.ListUsageRequest()
            req.CopyFrom(first)
            req.page_token = resp.next_page_token

    def _pages(self, first: pb.ListEnvironmentsRequest) -> Iterator[pb.Environment]:
        req = first
        while True:
            # Each page's request is its own, so every retry of a page sends it unchanged.
            resp = self.call(_call.Safety.IDEMPOTENT, self.api.ListEnvironments, req)
            yield from resp.environments
            if not resp.next_page_token:
                return
            req = pb.ListEnvironmentsRequest()
            req.CopyFrom(first)
            req.page_token = resp.next_page_token


def _lifecycle_state(state: int | str) -> int:
    """A LifecycleState value from itself or its name, with or without the prefix."""
    if isinstance(state, str):
        return pb.LifecycleState.Value(state if state.startswith("LIFECYCLE_STATE_") else "LIFECYCLE_STATE_" + state)
    pb.LifecycleState.Name(state)  # an unknown value raises ValueError
    return state


def _usage_enum(enum: Any, prefix: str, value: int | str) -> int:
    """A usage enum's value from itself or its name, with or without the prefix."""
    if isinstance(value, str):
        return int(enum.Value(value if value.startswith(prefix) else prefix + value))
    enum.Name(value)  # an unknown value raises ValueError
    return value


def _set_range(req: Any, start: datetime.datetime | None, end: datetime.datetime | None) -> None:
    """Sets a usage request's [start, end): timezone-aware datetimes (a naive one would be
    read as UTC, silently shifting the range by the local offset), end after start."""
    for name, t in (("start", start), ("end", end)):
        if t is None:
            continue
        if t.tzinfo is None or t.utcoffset() is None:
            raise ValueError(f"{name} {t}: want a timezone-aware datetime")
        getattr(req, name).FromDatetime(t)
    if start is not None and end is not None and end <= start:
        raise ValueError(f"end {end} is not after start {start}")
