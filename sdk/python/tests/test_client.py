"""The requests the client builds for ensure's metadata and deadline and for listing
environments page by page (no cluster: a fake stub answers, behind the client's own retry
loop)."""

from __future__ import annotations

import grpc
import pytest

from execplane import Client, Deadline, Owner, _call
from execplane._proto.execution.v1 import execution_pb2 as pb

_OWNER = Owner("https://idp.example", "alice")


class _Unavailable(grpc.RpcError):
    """A connection that failed before an answer: retried for a call with an operation id."""

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return "reset"


class _Api:
    """Answers EnsureEnvironment with a ready environment, and ListEnvironments from pages
    keyed by page token; the attempts named in fail_first fail before an answer."""

    def __init__(self, pages: dict[str, pb.ListEnvironmentsResponse] | None = None, fail_first: tuple[str, ...] = ()) -> None:
        self.pages = pages or {}
        self.fail_first = set(fail_first)
        self.requests: list[object] = []

    def _attempt(self, key: str, request: object) -> None:
        self.requests.append(request)
        if key in self.fail_first:
            self.fail_first.discard(key)
            raise _Unavailable()

    def EnsureEnvironment(self, request: pb.EnsureEnvironmentRequest, timeout: float | None = None) -> pb.EnsureEnvironmentResponse:
        self._attempt("ensure", request)
        env = pb.Environment(ref=pb.EnvironmentRef(id="env-1", revision="7"), lifecycle=pb.LIFECYCLE_STATE_READY, ready=True,
                             metadata=request.metadata,
                             references=[pb.Reference(binding_id=request.binding_id, state=pb.REFERENCE_STATE_PUBLISHED)])
        return pb.EnsureEnvironmentResponse(environment=env, environment_grant=pb.Grant(token="g"), created=True)

    def ListEnvironments(self, request: pb.ListEnvironmentsRequest, timeout: float | None = None) -> pb.ListEnvironmentsResponse:
        self._attempt("list:" + request.page_token, request)
        return self.pages[request.page_token]


class _Client:
    """The client's calls and retry rules over a fake stub instead of a connection."""

    call = Client.call
    ensure = Client.ensure
    list_environments = Client.list_environments
    _pages = Client._pages

    def __init__(self, api: _Api) -> None:
        self.api, self.timeout, self.retry = api, 30.0, _call.RetryPolicy(initial=0.0, ceiling=0.0)


def _client(api: _Api) -> Client:
    return _Client(api)  # type: ignore[return-value]


def _envs(*ids: str) -> list[pb.Environment]:
    return [pb.Environment(ref=pb.EnvironmentRef(id=i, revision="1")) for i in ids]


def test_ensure_sends_metadata_and_deadline() -> None:
    api = _Api(fail_first=("ensure",))
    env = _client(api).ensure(_OWNER, "conv-1", "sandbox", metadata={"team": "search", "ticket": "T-1"},
                              deadline=Deadline(after=7200, action="SUSPEND"))

    first, retry = api.requests
    assert first is retry  # the retry sends the same request: the same operation id
    assert isinstance(first, pb.EnsureEnvironmentRequest)
    assert (first.owner, first.binding_id, first.profile) == (_OWNER.proto(), "conv-1", "sandbox")
    assert dict(first.metadata) == {"team": "search", "ticket": "T-1"}
    assert first.deadline == pb.Deadline(after=_call.duration(7200), action=pb.DEADLINE_ACTION_SUSPEND)
    assert env.created and dict(env.status.metadata) == {"team": "search", "ticket": "T-1"}


def test_ensure_without_metadata_or_deadline() -> None:
    api = _Api()
    _client(api).ensure(_OWNER, "conv-1", "sandbox")

    (req,) = api.requests
    assert isinstance(req, pb.EnsureEnvironmentRequest)
    assert len(req.metadata) == 0 and not req.HasField("deadline")


def test_list_environments_pages() -> None:
    api = _Api(pages={
        "": pb.ListEnvironmentsResponse(environments=_envs("env-a", "env-b"), next_page_token="p2"),
        "p2": pb.ListEnvironmentsResponse(environments=_envs("env-c"), next_page_token="p3"),
        "p3": pb.ListEnvironmentsResponse(),  # a last page may be empty
    }, fail_first=("list:p2",))
    envs = _client(api).list_environments(_OWNER, binding_id="conv-1", lifecycle=["READY", "LIFECYCLE_STATE_SUSPENDED", pb.LIFECYCLE_STATE_RETIRED],
                                          metadata={"team": "search"}, page_size=2)

    assert [e.ref.id for e in envs] == ["env-a", "env-b", "env-c"]
    assert [r.page_token for r in api.requests] == ["", "p2", "p2", "p3"]  # type: ignore[attr-defined]
    assert api.requests[1] is api.requests[2]  # a page's retry sends the same request
    want = pb.ListEnvironmentsRequest(owner=_OWNER.proto(), binding_id="conv-1",
                                      lifecycle=[pb.LIFECYCLE_STATE_READY, pb.LIFECYCLE_STATE_SUSPENDED, pb.LIFECYCLE_STATE_RETIRED],
                                      metadata={"team": "search"}, page_size=2)
    for req in api.requests:
        assert isinstance(req, pb.ListEnvironmentsRequest)
        req_without_token = pb.ListEnvironmentsRequest()
        req_without_token.CopyFrom(req)
        req_without_token.ClearField("page_token")
        assert req_without_token == want


def test_list_environments_fetches_a_page_when_reached() -> None:
    api = _Api(pages={
        "": pb.ListEnvironmentsResponse(environments=_envs("env-a"), next_page_token="p2"),
        "p2": pb.ListEnvironmentsResponse(environments=_envs("env-b")),
    })
    envs = _client(api).list_environments(_OWNER)
    assert api.requests == []  # nothing asked before the iteration starts
    assert next(envs).ref.id == "env-a"
    assert len(api.requests) == 1  # the second page waits until the first is consumed
    envs.close()


@pytest.mark.parametrize("kwargs", [
    {"page_size": -1},
    {"page_size": 501},
    {"lifecycle": ["RUNNING"]},  # not a LifecycleState
    {"lifecycle": [99]},
])
def test_list_environments_refuses_bad_arguments_at_the_call(kwargs: dict) -> None:  # type: ignore[type-arg]
    api = _Api()
    with pytest.raises(ValueError):
        _client(api).list_environments(_OWNER, **kwargs)
    assert api.requests == []
