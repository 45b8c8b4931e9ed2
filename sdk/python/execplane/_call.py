"""One logical call: retried per its safety, with the same request (so the same operation id)
on every attempt — the Go SDK's rules (pkg/client/retry.go)."""

from __future__ import annotations

import enum
import random
import secrets
import time
from typing import Callable, TypeVar

import grpc
from google.protobuf import duration_pb2

from execplane import errors

T = TypeVar("T")

# Bounds the wait until an environment is Ready (a cold start on a real cluster: volume
# provisioning, an image pull), in seconds.
DEFAULT_READY_TIMEOUT = 300.0


def new_operation_id() -> str:
    """A fresh operation id: 128 random bits, so that two logical calls never share one."""
    return "sdk-" + secrets.token_hex(16)


def duration(seconds: float) -> duration_pb2.Duration:
    """A protobuf Duration of so many seconds."""
    d = duration_pb2.Duration()
    d.FromNanoseconds(int(seconds * 1e9))
    return d


class Safety(enum.Enum):
    """Which failures a call may be retried after."""

    # Only answers the server marks retryable (nothing was done): calls that must not run
    # twice and carry no operation id (writes, commands).
    SERVER_SAYS_SO = 1
    # Also transport failures (UNAVAILABLE without an answer): running the call twice is
    # harmless — reads, or mutations that carry an operation id.
    IDEMPOTENT = 2


class RetryPolicy:
    """Attempts and full-jitter exponential backoff."""

    def __init__(self, attempts: int = 5, initial: float = 0.1, ceiling: float = 3.0) -> None:
        self.attempts, self.initial, self.ceiling = attempts, initial, ceiling


def call(policy: RetryPolicy, safety: Safety, deadline: float | None, fn: Callable[[float | None], T]) -> T:
    """Runs fn(timeout) until it succeeds, fails for good, or the deadline (time.monotonic())
    passes. fn sends the same request every time."""
    backoff = policy.initial
    attempt = 0
    while True:
        attempt += 1
        timeout = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        try:
            return fn(timeout)
        except grpc.RpcError as rpc_err:
            err = errors.from_rpc_error(rpc_err)
        if safety is Safety.SERVER_SAYS_SO and not err.reason and err.code in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED):
            # The call ended on this side while the gateway may have been writing or running:
            # what happened is unknown, and a blind retry could do it twice.
            err = errors.new_error(err.code, "OUTCOME_UNKNOWN", err.message, request_id=err.request_id)
        expired = deadline is not None and time.monotonic() >= deadline
        if attempt >= policy.attempts or not retryable(err, safety) or expired:
            raise err
        # Full jitter: spread retries of many callers after a shared failure.
        pause = random.uniform(0, backoff)
        backoff = min(backoff * 2, policy.ceiling)
        if deadline is not None:
            pause = min(pause, max(deadline - time.monotonic(), 0.0))
        time.sleep(pause)


def retryable(err: errors.ExecplaneError, safety: Safety) -> bool:
    """Whether a failed attempt may go again."""
    if safety is Safety.SERVER_SAYS_SO and err.code in (grpc.StatusCode.CANCELLED, grpc.StatusCode.DEADLINE_EXCEEDED):
        return False  # the gateway's own call ended midway: a write or command may have happened
    if err.reason:
        return err.retryable
    # No answer from execplane: the connection failed. Only a call harmless twice may go again.
    return safety is Safety.IDEMPOTENT and err.code is grpc.StatusCode.UNAVAILABLE
