"""The requests the client builds for an environment's usage ledger and for usage listed page
by page (no cluster: a fake stub answers, behind the client's own retry loop)."""

from __future__ import annotations

import datetime

import grpc
import pytest
from google.protobuf import timestamp_pb2

from execplane import Client, Owner, _call
from execplane._proto.execution.v1 import execution_pb2 as pb

_OWNER = Owner("https://idp.example", "alice")
_UTC = datetime.timezone.utc
_START = datetime.datetime(2026, 11, 30, 2, 0, tzinfo=datetime.timezone(datetime.timedelta(hours=2)))  # 00:00 UTC
_END = datetime.datetime(2026, 12, 1, tzinfo=_UTC)


class _Unavailable(grpc.RpcError):
    """A connection that failed before an answer: retried for a read."""

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return "reset"


def _ts(t: datetime.datetime) -> timestamp_pb2.Timestamp:
    out = timestamp_pb2.Timestamp()
    out.FromDatetime(t)
    return out


_LEDGER = pb.GetUsageResponse(environment=pb.EnvironmentRef(id="env-1", revision="7"), binding_id="conv-1", profile="sandbox",
                              totals=pb.UsageCounters(cpu_nanoseconds=1_500_000_000, commands=3), owner_hash="ab12",
                              windows=[pb.UsageWindow(start=_ts(_START), end=_ts(_START + datetime.timedelta(hours=1)),
                                                      usage=pb.UsageCounters(commands=3), closed=True)])


class _Api:
    """Answers GetUsage with a fixed ledger and ListUsage from pages keyed by page token; the
    attempts named in fail_first fail before an answer."""

    def __init__(self, pages: dict[str, pb.ListUsageResponse] | None = None, fail_first: tuple[str, ...] = ()) -> None:
        self.pages = pages or {}
        self.fail_first = set(fail_first)
        self.requests: list[object] = []

    def _attempt(self, key: str, request: object) -> None:
        self.requests.append(request)
        if key in self.fail_first:
            self.fail_first.discard(key)
            raise _Unavailable()

    def GetUsage(self, request: pb.GetUsageRequest, timeout: float | None = None) -> pb.GetUsageResponse:
        self._attempt("get", request)
        return _LEDGER

    def ListUsage(self, request: pb.ListUsageRequest, timeout: float | None = None) -> pb.ListUsageResponse:
        self._attempt("list:" + request.page_token, request)
        return self.pages[request.page_token]


class _Client:
    """The client's calls and retry rules over a fake stub instead of a connection."""

    call = Client.call
    get_usage = Client.get_usage
    list_usage = Client.list_usage
    _usage_pages = Client._usage_pages

    def __init__(self, api: _Api) -> None:
        self.api, self.timeout, self.retry = api, 30.0, _call.RetryPolicy(initial=0.0, ceiling=0.0)


def _client(api: _Api) -> Client:
    return _Client(api)  # type: ignore[return-value]


def _record(env_id: str, hour: int) -> pb.UsageRecord:
    start = datetime.datetime(2026, 11, 30, hour, tzinfo=_UTC)
    return pb.UsageRecord(environment=pb.EnvironmentRef(id=env_id, revision="r-" + env_id),
                          window=pb.UsageWindow(start=_ts(start), end=_ts(start + datetime.timedelta(hours=1)),
                                                usage=pb.UsageCounters(commands=hour)))


def test_get_usage_sends_the_range() -> None:
    api = _Api(fail_first=("get",))
    ledger = _client(api).get_usage("env-1", "7", start=_START, end=_END, granularity="DAY")

    assert ledger == _LEDGER
    first, retry = api.requests
    assert first is retry  # a read's retry sends the same request
    assert first == pb.GetUsageRequest(environment=pb.EnvironmentRef(id="env-1", revision="7"), start=_ts(_START), end=_ts(_END),
                                       granularity=pb.USAGE_GRANULARITY_DAY)
    assert first.start.ToDatetime() == datetime.datetime(2026, 11, 30)  # the offset applied: UTC on the wire


def test_get_usage_defaults() -> None:
    api = _Api()
    _client(api).get_usage("env-1")

    (req,) = api.requests
    assert isinstance(req, pb.GetUsageRequest)
    assert req.environment == pb.EnvironmentRef(id="env-1")
    assert not req.HasField("start") and not req.HasField("end") and req.granularity == pb.USAGE_GRANULARITY_UNSPECIFIED


def test_list_usage_pages() -> None:
    api = _Api(pages={
        "": pb.ListUsageResponse(records=[_record("env-a", 10), _record("env-a", 11)], next_page_token="p2"),
        "p2": pb.ListUsageResponse(records=[_record("env-b", 10)], next_page_token="p3"),
        "p3": pb.ListUsageResponse(),  # a last page may be empty
    }, fail_first=("list:p2",))
    records = _client(api).list_usage(owner=_OWNER, binding_id="conv-1", start=_START, end=_END, granularity="USAGE_GRANULARITY_HOUR",
                                      group_by="BINDING", page_size=2)

    assert [(r.environment.id, r.window.usage.commands) for r in records] == [("env-a", 10), ("env-a", 11), ("env-b", 10)]
    assert [r.page_token for r in api.requests] == ["", "p2", "p2", "p3"]  # type: ignore[attr-defined]
    assert api.requests[1] is api.requests[2]  # a page's retry sends the same request
    want = pb.ListUsageRequest(owner=_OWNER.proto(), binding_id="conv-1", start=_ts(_START), end=_ts(_END),
                               granularity=pb.USAGE_GRANULARITY_HOUR, group_by=pb.USAGE_GROUP_BY_BINDING, page_size=2)
    for req in api.requests:
        assert isinstance(req, pb.ListUsageRequest)
        without_token = pb.ListUsageRequest()
        without_token.CopyFrom(req)
        without_token.ClearField("page_token")
        assert without_token == want


def test_list_usage_scopes() -> None:
    pages = {"": pb.ListUsageResponse(records=[_record("env-a", 1)])}
    for kwargs, want in [
        ({}, pb.ListUsageRequest()),  # the client's own, every owner's
        ({"client": "spiffe://example.org/platform", "group_by": pb.USAGE_GROUP_BY_OWNER},
         pb.ListUsageRequest(client="spiffe://example.org/platform", group_by=pb.USAGE_GROUP_BY_OWNER)),
        ({"all_clients": True, "group_by": "CLIENT", "granularity": "TOTAL"},
         pb.ListUsageRequest(all_clients=True, group_by=pb.USAGE_GROUP_BY_CLIENT, granularity=pb.USAGE_GRANULARITY_TOTAL)),
    ]:
        api = _Api(pages=pages)
        assert len(list(_client(api).list_usage(**kwargs))) == 1
        (req,) = api.requests
        assert req == want
        assert not req.HasField("owner")  # type: ignore[attr-defined]


def test_list_usage_fetches_a_page_when_reached() -> None:
    api = _Api(pages={
        "": pb.ListUsageResponse(records=[_record("env-a", 1)], next_page_token="p2"),
        "p2": pb.ListUsageResponse(records=[_record("env-b", 1)]),
    })
    records = _client(api).list_usage()
    assert api.requests == []  # nothing asked before the iteration starts
    assert next(records).environment.id == "env-a"
    assert len(api.requests) == 1  # the second page waits until the first is consumed
    records.close()


@pytest.mark.parametrize("kwargs", [
    {"page_size": -1},
    {"page_size": 1001},
    {"granularity": "WEEK"},
    {"granularity": 9},
    {"group_by": "TENANT"},
    {"group_by": 9},
    {"client": "spiffe://example.org/platform", "all_clients": True},
    {"start": datetime.datetime(2026, 11, 30)},  # naive: which zone?
    {"start": _END, "end": _START},
    {"start": _END, "end": _END},
])
def test_list_usage_refuses_bad_arguments_at_the_call(kwargs: dict) -> None:  # type: ignore[type-arg]
    api = _Api()
    with pytest.raises(ValueError):
        _client(api).list_usage(**kwargs)
    assert api.requests == []


@pytest.mark.parametrize("kwargs", [
    {"granularity": "MONTH"},
    {"end": datetime.datetime(2026, 12, 1)},
    {"start": _END, "end": _START},
])
def test_get_usage_refuses_bad_arguments_before_the_call(kwargs: dict) -> None:  # type: ignore[type-arg]
    api = _Api()
    with pytest.raises(ValueError):
        _client(api).get_usage("env-1", **kwargs)
    assert api.requests == []
