"""A handle on one binding's environment: its state, its reference, its run claim."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

import grpc

from execplane import _call, errors
from execplane._call import DEFAULT_READY_TIMEOUT, duration, new_operation_id
from execplane._proto.execution.v1 import execution_pb2 as pb
from execplane.run import DEFAULT_RUN_TTL, MAX_RUN_TTL, MIN_RUN_TTL, Run
from execplane.types import Deadline, Owner

if TYPE_CHECKING:
    from execplane.client import Client

# WaitReady's long poll: each AttachEnvironment holds its answer up to this long until the
# controller sees the environment ready, so the wait ends as soon as it is, without polling.
_READY_LONG_POLL = 20.0
# The margin kept between a long poll and the caller's deadline.
_READY_MARGIN = 0.25
# The pause between polls of a gateway that answers at once (older than wait_ready).
_READY_POLL_INITIAL, _READY_POLL_MAX = 0.2, 2.0

# DeleteEnvironment's wait bounds (the server's), in seconds: it holds its answer at most
# this long for the deletion to complete.
_MAX_DELETE_WAIT = 30.0

_TERMINAL = (pb.LIFECYCLE_STATE_RETIRING, pb.LIFECYCLE_STATE_RETIRED, pb.LIFECYCLE_STATE_DELETING,
             pb.LIFECYCLE_STATE_DELETED)


class Environment:
    """One binding's environment. Safe for concurrent use from threads."""

    def __init__(self, client: Client, owner: Owner, binding_id: str, state: pb.Environment, grant: pb.Grant | None) -> None:
        self._client = client
        self.owner = owner
        self.binding_id = binding_id
        self.created = False
        self._lock = threading.Lock()
        self._state = state
        self._grant = grant

    @property
    def id(self) -> str:
        return self.ref.id

    @property
    def revision(self) -> str:
        return self.ref.revision

    @property
    def ref(self) -> pb.EnvironmentRef:
        with self._lock:
            return self._state.ref

    @property
    def status(self) -> pb.Environment:
        """The environment as last seen (a copy)."""
        with self._lock:
            out = pb.Environment()
            out.CopyFrom(self._state)
            return out

    def _set(self, state: pb.Environment | None, grant: pb.Grant | None = None) -> None:
        with self._lock:
            if state is not None and state.ByteSize() > 0:
                self._state = state
            if grant is not None and grant.token:
                self._grant = grant

    def _environment_grant(self) -> pb.Grant | None:
        with self._lock:
            return self._grant

    def reference_state(self) -> int:
        with self._lock:
            for r in self._state.references:
                if r.binding_id == self.binding_id:
                    return r.state
        return pb.REFERENCE_STATE_UNSPECIFIED

    def refresh(self, wait_ready: float = 0.0) -> None:
        """Attaches again: the current state and a fresh environment grant; with wait_ready,
        the answer is held up to that long until the environment is ready."""
        req = pb.AttachEnvironmentRequest(owner=self.owner.proto(), binding_id=self.binding_id, environment=self.ref)
        if wait_ready > 0:
            req.wait_ready.CopyFrom(duration(wait_ready))
        resp = self._client.call(_call.Safety.IDEMPOTENT, self._client.api.AttachEnvironment, req,
                                 timeout=self._client.timeout + wait_ready)
        self._set(resp.environment, resp.environment_grant)

    def wait_ready(self, timeout: float) -> None:
        """Waits until the environment is Ready. Fails at once (Fenced) when it is fenced and
        (NotReady) when it is retiring, retired, being deleted or deleted; otherwise raises
        TimeoutError when timeout passes first."""
        deadline = time.monotonic() + timeout
        pause = _READY_POLL_INITIAL
        while True:
            st = self.status
            if st.ready:
                return
            if st.fence_state == pb.FENCE_STATE_FENCE_UNKNOWN:
                raise errors.new_error(grpc.StatusCode.FAILED_PRECONDITION, "FENCED", "the environment is fenced: " + st.message)
            if st.lifecycle in _TERMINAL:
                raise errors.new_error(grpc.StatusCode.FAILED_PRECONDITION, "NOT_READY", f"the environment is {pb.LifecycleState.Name(st.lifecycle)}")
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"execplane: environment {self.id} not ready in {timeout:.0f} s "
                                   f"(last: {pb.LifecycleState.Name(st.lifecycle)} {st.message})")
            start = time.monotonic()
            self.refresh(wait_ready=max(min(_READY_LONG_POLL, left - _READY_MARGIN), 0.0))
            if self.status.ready:
                return
            early = pause - (time.monotonic() - start)
            if early > 0:  # answered sooner than a poll would have waited: no long poll here
                time.sleep(min(early, max(deadline - time.monotonic(), 0.0)))
                pause = min(pause * 1.5, _READY_POLL_MAX)

    def commit_reference(self) -> None:
        """Publishes the binding's pending reference (after the caller recorded the
        environment on its side)."""
        self._reference(self._client.api.CommitReference, pb.CommitReferenceRequest)

    def release_reference(self) -> None:
        """Removes the binding's published reference in one step."""
        self._reference(self._client.api.ReleaseReference, pb.ReleaseReferenceRequest)

    def _reference(self, rpc, request_type, timeout: float | None = None, **fields) -> None:  # type: ignore[no-untyped-def]
        # One request, so one operation id, for every retry: the server answers the first
        # outcome instead of acting twice.
        req = request_type(operation_id=new_operation_id(),
                           target=pb.ReferenceTarget(owner=self.owner.proto(), environment=self.ref, binding_id=self.binding_id),
                           **fields)
        resp = self._client.call(_call.Safety.IDEMPOTENT, rpc, req, timeout=timeout)
        self._set(resp.environment)

    def snapshot(self, name: str, timeout: float | None = None) -> pb.Snapshot:
        """A crash-consistent snapshot of the workspace named ``name`` (CreateSnapshot): the
        executor's processes are stopped while it is cut. Returns once it is cut: state
        ``SNAPSHOT_STATE_READY``, or ``SNAPSHOT_STATE_FAILED`` with ``failure_reason``.
        ``Client.ensure(..., from_snapshot=name)`` restores it; ``fork`` does both."""
        req = pb.CreateSnapshotRequest(operation_id=new_operation_id(), name=name,
                                       target=pb.ReferenceTarget(owner=self.owner.proto(), environment=self.ref, binding_id=self.binding_id))
        return self._client.call(_call.Safety.IDEMPOTENT, self._client.api.CreateSnapshot, req, timeout=timeout).snapshot

    def fork(self, snapshot: str, binding_id: str, profile: str, **ensure: Any) -> Environment:
        """Snapshots this environment as ``snapshot`` and ensures ``binding_id``'s environment
        from it: an independent copy of the workspace, no durable command running, none of
        this environment's grants. The snapshot stays, the caller's to delete."""
        snap = self.snapshot(snapshot)
        if snap.state != pb.SNAPSHOT_STATE_READY:
            raise RuntimeError(f"snapshot {snapshot}: {pb.SnapshotState.Name(snap.state)}: {snap.failure_reason} {snap.failure_message}")
        return self._client.ensure(self.owner, binding_id, profile, from_snapshot=snapshot, **ensure)

    def suspend(self) -> None:
        """Stops the executor and keeps the workspace; every grant issued before dies. Refused
        (RunClaimHeld) while an unexpired run claim exists. resume (or ensure, attach,
        acquire) brings it back at a new epoch."""
        self._reference(self._client.api.SuspendEnvironment, pb.SuspendEnvironmentRequest)

    def resume(self) -> None:
        """Starts a new executor for a suspended environment at epoch + 1; wait_ready waits
        for it."""
        self._reference(self._client.api.ResumeEnvironment, pb.ResumeEnvironmentRequest)

    def delete(self, wait: float = 0) -> None:
        """Ends the environment for its owner: every grant dies at once, this handle's run
        included; the executor stops, and every command in it with it; the workspace is
        deleted. The binding must hold the only reference on it (NotReady says how many
        others do: each releases its own first). With wait (at most 30 s), the answer waits
        until the deletion completed: status.lifecycle then says DELETED. A deleting or
        deleted environment is answered as it is, so a repeated delete is safe."""
        if not 0 <= wait <= _MAX_DELETE_WAIT:
            raise ValueError(f"wait {wait} s: want 0..{_MAX_DELETE_WAIT:.0f} s")
        fields = {"wait": duration(wait)} if wait > 0 else {}
        # The server may hold its answer for wait: the call is given that long on top.
        self._reference(self._client.api.DeleteEnvironment, pb.DeleteEnvironmentRequest,
                        timeout=self._client.timeout + wait, **fields)

    def set_retention(self, retain: bool) -> None:
        """Keeps the workspace from the profile's time limits (retiredTTL, suspendedTTL,
        maxLifetime) when retain is true — a workspace the owner still wants outlives them —
        and lets them apply again when false. status.retained says which holds."""
        self._reference(self._client.api.SetEnvironmentRetention, pb.SetEnvironmentRetentionRequest, retain=retain)

    def set_deadline(self, deadline: Deadline | None) -> None:
        """Sets or moves the environment's deadline, counted from now: at it the controller
        deletes or suspends the environment (``deadline.action``), whatever it is doing — a
        suspension ends a held run claim. None clears it. status.deadline and
        status.deadline_action say which holds."""
        fields = {"deadline": deadline.proto()} if deadline is not None else {}
        self._reference(self._client.api.SetEnvironmentDeadline, pb.SetEnvironmentDeadlineRequest, **fields)

    def acquire(self, run_id: str, *, ttl: float = DEFAULT_RUN_TTL, renew: bool = True) -> Run:
        """Takes the environment's run claim — execution authority, fencing any earlier
        holder — and, unless renew is false, renews it in a background thread until the run
        is closed. Use the run as a context manager: it is released on exit. A suspended
        environment is resumed first (its grants died: the handle attaches again and waits
        until it is ready)."""
        if not MIN_RUN_TTL <= ttl <= MAX_RUN_TTL:
            raise ValueError(f"ttl {ttl} s: want {MIN_RUN_TTL}..{MAX_RUN_TTL} s")

        def attempt() -> pb.AcquireRunResponse:
            req = pb.AcquireRunRequest(operation_id=new_operation_id(), environment_grant=self._environment_grant(),
                                       environment=self.ref, run_id=run_id, ttl=duration(ttl))
            return self._client.call(_call.Safety.IDEMPOTENT, self._client.api.AcquireRun, req)

        try:
            resp = attempt()
        except (errors.GrantInvalid, errors.Revoked, errors.NotReady):
            # The environment grant expired or was revoked (a suspension revokes every
            # grant), the handle is old, or the environment is suspending or resuming: attach
            # again — which resumes a suspended environment —, wait until it is ready, retry.
            # The refused attempt did nothing, so a fresh operation id is right.
            self.refresh()
            self.wait_ready(DEFAULT_READY_TIMEOUT)
            resp = attempt()
        self._set(resp.environment)
        return Run(self._client, self, run_id, ttl, resp.run, resp.run_grant, renew=renew)
