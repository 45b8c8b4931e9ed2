"""The Go SDK's end-to-end session, walked with the Python SDK against the local stack:
ensure → ready → acquire → write → run → read → release, a compare-and-swap conflict, a
stale-epoch refusal, and a retried call that does not act twice."""

from __future__ import annotations

import threading

import grpc
import pytest

from conftest import connect
from execplane import Client, Owner, RunClosed, errors, new_operation_id
from execplane._proto.execution.v1 import execution_pb2 as pb


def test_session(client: Client, owner: Owner, profile: str) -> None:
    env = client.ensure(owner, "py-conv-1", profile)
    assert env.created and env.status.ready and env.id and env.revision
    again = client.ensure(owner, "py-conv-1", profile)
    assert not again.created and again.revision == env.revision
    with pytest.raises(errors.NotFound):
        client.attach(Owner(owner.issuer, "mallory"), "py-conv-1", env.id, env.revision)

    with env.acquire("turn-1") as run:
        assert run.epoch == env.status.epoch
        info = run.write_file("src/main.py", "print('hello from python')\n", create_parents=True)
        assert info.size == 27 and info.version
        result = run.run(["sh", "-c", "cat src/main.py | tr a-z A-Z > src/upper.txt; echo done; echo warn >&2; exit 3"])
        assert (result.state, result.exit_code, result.stdout.text(), result.stderr.text()) == ("FAILED", 3, "done\n", "warn\n")
        assert run.read_file("src/upper.txt") == b"PRINT('HELLO FROM PYTHON')\n"
        ok = run.run(shell="ls src", timeout=10)
        assert ok.succeeded and ok.stdout.text() == "main.py\nupper.txt\n"

        # Compare-and-swap: the current version wins once; the stale one is refused and
        # changes nothing.
        v2 = run.write_file("src/main.py", "print(2)\n", if_version=info.version)
        with pytest.raises(errors.VersionMismatch) as refused:
            run.write_file("src/main.py", "lost update\n", if_version=info.version)
        assert isinstance(refused.value, errors.Conflict)
        assert refused.value.reason == "VERSION_MISMATCH" and not refused.value.retryable and refused.value.request_id
        assert run.read_file("src/main.py") == b"print(2)\n" and run.stat("src/main.py").version == v2.version
        with pytest.raises(errors.AlreadyExists):
            run.write_file("src/main.py", "x", create_only=True)
        with pytest.raises(errors.NotFound):
            run.stat("src/absent.txt")
        with pytest.raises(errors.PathEscape):
            run.read_file("../etc/passwd")

        assert sorted(f.path for f in run.list_dir("src")) == ["main.py", "upper.txt"]
        assert run.glob("**/*.py") == (["src/main.py"], False)
        assert [(m.path, m.line, m.text) for m in run.grep("HELLO").matches] == [("src/upper.txt", 1, "PRINT('HELLO FROM PYTHON')")]
        run.rename("src/upper.txt", "src/UPPER.txt")
        assert run.remove("src", recursive=True) == 3

    # Released: the claim is gone, and the closed run refuses to act.
    env.refresh()
    assert not env.status.HasField("active_run")
    with pytest.raises(RunClosed):
        run.stat("")


def test_stale_epoch(client: Client, owner: Owner, profile: str) -> None:
    env = client.ensure(owner, "py-conv-2", profile)
    first = env.acquire("turn-1", renew=False)
    first.write_file("f.txt", "first\n")
    # The claim ends behind this handle's back — released by another process holding the
    # same run (the Go SDK's RunState), as a crashed worker's successor would — and another
    # run takes it: this handle's epoch is stale from then on.
    client.api.ReleaseRun(pb.ReleaseRunRequest(operation_id=new_operation_id(), run_grant=first._run_grant(), environment=env.ref), timeout=10)
    with client.attach(owner, "py-conv-2", env.id, env.revision).acquire("turn-2") as second:
        assert second.epoch > first.epoch
        with pytest.raises(errors.StaleEpoch):
            first.write_file("f.txt", "from the fenced run\n")
        with pytest.raises(errors.StaleEpoch):
            first.run(["true"])
        assert second.read_file("f.txt") == b"first\n"


class _LoseFirstAnswer(grpc.UnaryUnaryClientInterceptor):
    """Lets the first call of a method through and then drops its answer, as a connection
    that broke after the server acted would: the SDK sees UNAVAILABLE with no answer."""

    class Lost(grpc.RpcError):
        def code(self) -> grpc.StatusCode:
            return grpc.StatusCode.UNAVAILABLE

        def details(self) -> str:
            return "connection reset (injected after the server answered)"

    def __init__(self, method: str) -> None:
        self.method = method
        self.requests: list[object] = []
        self._lock = threading.Lock()

    def intercept_unary_unary(self, continuation, details, request):  # type: ignore[no-untyped-def]
        outcome = continuation(details, request)
        if details.method.endswith("/" + self.method):
            with self._lock:
                self.requests.append(request)
                first = len(self.requests) == 1
            if first:
                outcome.result()  # the server acted
                raise self.Lost()
        return outcome


def test_a_retried_call_does_not_act_twice(owner: Owner, profile: str) -> None:
    lose = _LoseFirstAnswer("AcquireRun")
    with connect(interceptors=[lose]) as c:
        env = c.ensure(owner, "py-conv-3", profile)
        before = env.status.epoch
        with env.acquire("turn-1") as run:
            # The SDK retried the acquire whose answer was lost, with the same operation id,
            # and the server answered the first outcome: one claim, the epoch raised once.
            assert len(lose.requests) == 2
            assert lose.requests[0].operation_id == lose.requests[1].operation_id  # type: ignore[attr-defined]
            assert run.epoch == before + 1
            env.refresh()
            assert env.status.epoch == before + 1
            # A durable command started twice under one id runs once.
            first = run.start(shell="echo ran >> runs.txt", command_id="py-once")
            second = run.start(shell="echo ran >> runs.txt", command_id="py-once")
            assert first.id == second.id == "py-once"
            deadline_checks = 0
            while run.command_status("py-once")[0].running and deadline_checks < 100:
                deadline_checks += 1
                threading.Event().wait(0.1)
            info, out = run.command_status("py-once")
            assert info.state == "SUCCEEDED"
            assert run.read_file("runs.txt") == b"ran\n"
