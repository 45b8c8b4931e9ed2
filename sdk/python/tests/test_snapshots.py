"""The requests the client builds for snapshots (no cluster: a fake stub answers, behind the
client's own retry loop)."""

from __future__ import annotations

import grpc

from execplane import Client, Owner, _call
from execplane._proto.execution.v1 import execution_pb2 as pb

_OWNER = Owner("https://idp.example", "alice")
_SNAP = pb.Snapshot(name="before", state=pb.SNAPSHOT_STATE_READY, method=pb.SNAPSHOT_METHOD_COPY,
                    source=pb.EnvironmentRef(id="env-1", revision="7"), size_bytes=1 << 30)


class _Unavailable(grpc.RpcError):
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return "reset"


class _Api:
    def __init__(self, fail_first: int = 0) -> None:
        self.fail_first = fail_first
        self.requests: list[object] = []

    def _attempt(self, request: object) -> None:
        self.requests.append(request)
        if self.fail_first:
            self.fail_first -= 1
            raise _Unavailable()

    def GetSnapshot(self, request: pb.GetSnapshotRequest, timeout: float | None = None) -> pb.GetSnapshotResponse:
        self._attempt(request)
        return pb.GetSnapshotResponse(snapshot=_SNAP)

    def ListSnapshots(self, request: pb.ListSnapshotsRequest, timeout: float | None = None) -> pb.ListSnapshotsResponse:
        self._attempt(request)
        return pb.ListSnapshotsResponse(snapshots=[_SNAP])

    def DeleteSnapshot(self, request: pb.DeleteSnapshotRequest, timeout: float | None = None) -> pb.DeleteSnapshotResponse:
        self._attempt(request)
        return pb.DeleteSnapshotResponse(snapshot=_SNAP)


class _Client:
    call = Client.call
    get_snapshot = Client.get_snapshot
    list_snapshots = Client.list_snapshots
    delete_snapshot = Client.delete_snapshot

    def __init__(self, api: _Api) -> None:
        self.api, self.timeout, self.retry = api, 30.0, _call.RetryPolicy(initial=0.0, ceiling=0.0)


def test_get_and_list_snapshots() -> None:
    api = _Api(fail_first=1)
    c = _Client(api)
    assert c.get_snapshot(_OWNER, "before") == _SNAP  # type: ignore[attr-defined]
    first, retry = api.requests
    assert first is retry and first == pb.GetSnapshotRequest(owner=_OWNER.proto(), name="before")
    assert c.list_snapshots(_OWNER) == [_SNAP]  # type: ignore[attr-defined]
    assert api.requests[-1] == pb.ListSnapshotsRequest(owner=_OWNER.proto())


def test_delete_snapshot_retries_one_request() -> None:
    api = _Api(fail_first=1)
    assert _Client(api).delete_snapshot(_OWNER, "before") == _SNAP  # type: ignore[attr-defined]
    first, retry = api.requests
    assert first is retry  # one operation id for every attempt
    assert isinstance(first, pb.DeleteSnapshotRequest) and first.operation_id and first.name == "before"
