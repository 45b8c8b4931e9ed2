"""execplane: durable, isolated workspaces on Kubernetes — the Python SDK.

    from execplane import Client, Owner

    with Client("gateway:8443", ca_file="ca.pem", cert_file="client.pem", key_file="client-key.pem") as c:
        env = c.ensure(Owner("https://idp.example", "alice"), "conv-1", "sandbox")  # waits until Ready
        with env.acquire("turn-1") as run:  # renewed in the background, released on exit
            run.write_file("main.py", "print('hi')\\n", create_parents=True)
            result = run.run(["python3", "main.py"])
            print(result.exit_code, result.stdout.text())

The rules are the Go SDK's (docs/sdks.md): operation ids kept across retries, only what the
server marks retryable retried, OUTCOME_UNKNOWN never retried, the run claim renewed and
released, the API's reasons as exception classes (execplane.errors).
"""

from execplane import errors
from execplane.client import Client, new_operation_id
from execplane.environment import Environment
from execplane.errors import ExecplaneError
from execplane.run import DEFAULT_RUN_TTL, MAX_RUN_TTL, MIN_RUN_TTL, Run, RunClosed
from execplane.types import Chunk, CommandInfo, CommandOutput, CommandResult, Deadline, FileInfo, GrepMatch, GrepResult, Output, Owner

__all__ = [
    "Chunk", "Client", "CommandInfo", "CommandOutput", "CommandResult", "DEFAULT_RUN_TTL", "Deadline", "Environment", "ExecplaneError",
    "FileInfo", "GrepMatch", "GrepResult", "MAX_RUN_TTL", "MIN_RUN_TTL", "Output", "Owner", "Run", "RunClosed", "errors",
    "new_operation_id",
]
