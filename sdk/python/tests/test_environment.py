"""The requests an environment handle builds for the reference calls that end or keep its
workspace (no cluster: a fake stub answers, behind the client's own retry loop)."""

from __future__ import annotations

import grpc
import pytest

from execplane import Client, Deadline, Environment, Owner, _call, errors
from execplane._proto.execution.v1 import execution_pb2 as pb


class _Unavailable(grpc.RpcError):
    """A connection that failed before an answer: retried for a call with an operation id."""

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return "reset"


class _Api:
    """Fails each call's first attempt, then answers the environment in the given state."""

    def __init__(self, answer: pb.Environment) -> None:
        self.answer = answer
        self.requests: list[tuple[object, float | None]] = []

    def _answer(self, request: object, timeout: float | None, response_type: type) -> object:
        self.requests.append((request, timeout))
        if len(self.requests) == 1:
            raise _Unavailable()
        return response_type(environment=self.answer)

    def DeleteEnvironment(self, request: pb.DeleteEnvironmentRequest, timeout: float | None = None) -> object:
        return self._answer(request, timeout, pb.DeleteEnvironmentResponse)

    def SetEnvironmentRetention(self, request: pb.SetEnvironmentRetentionRequest, timeout: float | None = None) -> object:
        return self._answer(request, timeout, pb.SetEnvironmentRetentionResponse)

    def SetEnvironmentDeadline(self, request: pb.SetEnvironmentDeadlineRequest, timeout: float | None = None) -> object:
        return self._answer(request, timeout, pb.SetEnvironmentDeadlineResponse)


class _Client:
    """The client's call and retry rules over a fake stub instead of a connection."""

    call = Client.call

    def __init__(self, api: _Api) -> None:
        self.api, self.timeout, self.retry = api, 30.0, _call.RetryPolicy(initial=0.0, ceiling=0.0)


_OWNER = Owner("https://idp.example", "alice")
_REF = pb.EnvironmentRef(id="env-1", revision="7")


def _environment(answer: pb.Environment) -> tuple[Environment, _Api]:
    api = _Api(answer)
    state = pb.Environment(ref=_REF, lifecycle=pb.LIFECYCLE_STATE_READY, ready=True)
    return Environment(_Client(api), _OWNER, "conv-1", state, None), api  # type: ignore[arg-type]


def _target() -> pb.ReferenceTarget:
    return pb.ReferenceTarget(owner=_OWNER.proto(), environment=_REF, binding_id="conv-1")


@pytest.mark.parametrize("wait,want_wait,want_timeout", [
    (0, None, 30.0),  # answered at once: no wait sent
    (12.5, 12.5, 42.5),  # the call outlasts the server's hold
])
def test_delete(wait: float, want_wait: float | None, want_timeout: float) -> None:
    env, api = _environment(pb.Environment(ref=_REF, lifecycle=pb.LIFECYCLE_STATE_DELETED))
    env.delete(wait=wait)

    assert len(api.requests) == 2
    (first, first_timeout), (retry, _) = api.requests
    assert first is retry  # the retry sends the same request: the same operation id
    assert first.operation_id.startswith("sdk-") and first.target == _target()
    assert first.HasField("wait") == (want_wait is not None)
    if want_wait is not None:
        assert first.wait.ToNanoseconds() == int(want_wait * 1e9)
    assert first_timeout is not None and want_timeout - 1 < first_timeout <= want_timeout
    assert env.status.lifecycle == pb.LIFECYCLE_STATE_DELETED


@pytest.mark.parametrize("wait", [-1, 30.5])
def test_delete_wait_out_of_bounds(wait: float) -> None:
    env, api = _environment(pb.Environment())
    with pytest.raises(ValueError):
        env.delete(wait=wait)
    assert api.requests == []


@pytest.mark.parametrize("retain", [True, False])
def test_set_retention(retain: bool) -> None:
    env, api = _environment(pb.Environment(ref=_REF, lifecycle=pb.LIFECYCLE_STATE_READY, ready=True, retained=retain))
    env.set_retention(retain)

    (first, _), (retry, _) = api.requests
    assert first is retry
    assert (first.target, first.retain) == (_target(), retain)
    assert env.status.retained == retain


@pytest.mark.parametrize("deadline,want", [
    (Deadline(after=3600, action="SUSPEND"), pb.Deadline(after=_call.duration(3600), action=pb.DEADLINE_ACTION_SUSPEND)),
    (Deadline(after=1.5, action="DELETE"), pb.Deadline(after=_call.duration(1.5), action=pb.DEADLINE_ACTION_DELETE)),
    (None, None),  # clears: no deadline sent
])
def test_set_deadline(deadline: Deadline | None, want: pb.Deadline | None) -> None:
    answer = pb.Environment(ref=_REF, lifecycle=pb.LIFECYCLE_STATE_READY, ready=True)
    if want is not None:
        answer.deadline.FromSeconds(1_000_000)
        answer.deadline_action = want.action
    env, api = _environment(answer)
    env.set_deadline(deadline)

    (first, _), (retry, _) = api.requests
    assert first is retry  # the same operation id: the server counts from the first attempt
    assert first.operation_id.startswith("sdk-") and first.target == _target()
    assert first.HasField("deadline") == (want is not None)
    if want is not None:
        assert first.deadline == want
    assert env.status.HasField("deadline") == (want is not None)


@pytest.mark.parametrize("after,action", [
    (0.5, "DELETE"),  # under a second
    (8760 * 3600 + 1, "DELETE"),  # over a year
    (60, "delete"),
    (60, "DEADLINE_ACTION_DELETE"),
    (60, ""),
])
def test_deadline_out_of_bounds(after: float, action: str) -> None:
    with pytest.raises(ValueError):
        Deadline(after=after, action=action)


def test_a_deleted_environment_is_never_ready() -> None:
    env, api = _environment(pb.Environment())
    env._set(pb.Environment(ref=_REF, lifecycle=pb.LIFECYCLE_STATE_DELETED))
    with pytest.raises(errors.NotReady):
        env.wait_ready(timeout=60)
    assert api.requests == []
