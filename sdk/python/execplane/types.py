"""Plain values the SDK takes and returns: owners, deadlines, files, command results, durable
commands."""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field

from execplane._call import duration
from execplane._proto.execution.v1 import execution_pb2 as pb

# A deadline's distance from the call that sets it (the server's bounds), in seconds: a
# second is the controller's resolution in practice; a year is the longest time limit a
# profile may set.
MIN_DEADLINE, MAX_DEADLINE = 1.0, 8760 * 3600.0


@dataclass(frozen=True)
class Owner:
    """The end user a client acts for (the client must be allowed to attest owners)."""

    issuer: str
    subject: str

    def proto(self) -> pb.Owner:
        return pb.Owner(issuer=self.issuer, subject=self.subject)


@dataclass(frozen=True)
class Deadline:
    """Asks for ``action`` — ``"DELETE"`` the environment (executor and workspace) or
    ``"SUSPEND"`` it (keeping the workspace, ending a held run claim) — ``after`` seconds
    from the call that sets it (1 s .. 8760 h). ``Environment.status.deadline`` and
    ``deadline_action`` say which one holds."""

    after: float
    action: str  # "DELETE", "SUSPEND"

    def __post_init__(self) -> None:
        if not MIN_DEADLINE <= self.after <= MAX_DEADLINE:
            raise ValueError(f"deadline after {self.after} s: want {MIN_DEADLINE:.0f}..{MAX_DEADLINE:.0f} s")
        if self.action not in ("DELETE", "SUSPEND"):
            raise ValueError(f"deadline action {self.action!r}: want 'DELETE' or 'SUSPEND'")

    def proto(self) -> pb.Deadline:
        return pb.Deadline(after=duration(self.after), action=pb.DeadlineAction.Value("DEADLINE_ACTION_" + self.action))


@dataclass(frozen=True)
class FileInfo:
    """One object beneath the workspace root. ``path`` is relative to the root (for
    ``list_dir``, the entry's name); ``version`` is a regular file's content version, for
    compare-and-swap writes."""

    path: str
    type: str  # "FILE", "DIRECTORY", "SYMLINK"
    size: int
    mode: int
    modified_at: datetime.datetime | None
    version: str
    symlink_target: str = ""

    @property
    def is_dir(self) -> bool:
        return self.type == "DIRECTORY"

    @staticmethod
    def of(p: pb.FileInfo) -> FileInfo:
        modified = p.modified_at.ToDatetime(tzinfo=datetime.timezone.utc) if p.HasField("modified_at") else None
        return FileInfo(path=_text(p.path), type=pb.FileType.Name(p.type).removeprefix("FILE_TYPE_"), size=p.size,
                        mode=p.mode & 0o777, modified_at=modified, version=p.version, symlink_target=_text(p.symlink_target))


@dataclass(frozen=True)
class Chunk:
    """One read of a file: content, the file's info when read, and whether more follows."""

    content: bytes
    info: FileInfo
    more: bool


@dataclass(frozen=True)
class Output:
    """One captured stream: its head and, when it overflowed the profile's cap, its tail."""

    head: bytes = b""
    tail: bytes = b""
    total: int = 0
    truncated: bool = False

    def __bytes__(self) -> bytes:
        if not self.truncated:
            return self.head + self.tail
        return self.head + b"\n[... output truncated ...]\n" + self.tail

    def text(self) -> str:
        return bytes(self).decode("utf-8", errors="replace")


@dataclass(frozen=True)
class CommandResult:
    """How a command ended. ``exit_code`` for SUCCEEDED and FAILED (-1 otherwise);
    ``signal`` for the signalled states; ``message`` says why a command could not start."""

    state: str  # "SUCCEEDED", "FAILED", "TIMED_OUT", "CANCELLED", "KILLED", ...
    exit_code: int
    signal: int
    stdout: Output
    stderr: Output
    duration: datetime.timedelta
    message: str = ""
    receipt: str = ""

    @property
    def succeeded(self) -> bool:
        return self.state == "SUCCEEDED"

    @staticmethod
    def of(r: pb.CommandResult) -> CommandResult:
        def out(c: pb.CapturedOutput) -> Output:
            return Output(head=c.head, tail=c.tail, total=c.total_bytes, truncated=c.truncated)

        return CommandResult(state=pb.CommandState.Name(r.state).removeprefix("COMMAND_STATE_"), exit_code=r.exit_code, signal=r.signal,
                             stdout=out(r.stdout), stderr=out(r.stderr), duration=r.duration.ToTimedelta(), message=r.message, receipt=r.receipt)


@dataclass(frozen=True)
class CommandInfo:
    """A durable command: RUNNING until it ends, then how (``result``, totals only: read its
    output by offset with ``Run.command_status``)."""

    id: str
    state: str
    run_id: str
    epoch: int
    detached: bool
    stdout_bytes: int
    stderr_bytes: int
    result: CommandResult | None = None
    message: str = ""

    @property
    def running(self) -> bool:
        return self.state == "RUNNING"

    @staticmethod
    def of(c: pb.CommandInfo) -> CommandInfo:
        return CommandInfo(id=c.command_id, state=pb.CommandState.Name(c.state).removeprefix("COMMAND_STATE_"), run_id=c.run_id, epoch=c.epoch,
                           detached=c.detached, stdout_bytes=c.stdout_bytes, stderr_bytes=c.stderr_bytes,
                           result=CommandResult.of(c.result) if c.HasField("result") else None, message=c.message)


@dataclass(frozen=True)
class CommandOutput:
    """Output of a durable command from a cursor: the bytes of each stream and the offsets to
    ask from next; ``skipped`` counts bytes asked for that the spool no longer keeps."""

    stdout: bytes = b""
    stderr: bytes = b""
    next_stdout: int = 0
    next_stderr: int = 0
    skipped: int = 0


@dataclass(frozen=True)
class GrepMatch:
    path: str
    line: int
    text: str


@dataclass(frozen=True)
class GrepResult:
    matches: list[GrepMatch] = field(default_factory=list)
    truncated: bool = False
    files_searched: int = 0
    files_skipped: int = 0


def _text(b: bytes) -> str:
    """Paths are bytes on the wire; a str carries any of them (undecodable bytes as
    surrogates, as os.fsdecode does)."""
    return b.decode("utf-8", errors="surrogateescape")


def path_bytes(p: str | bytes) -> bytes:
    return p if isinstance(p, bytes) else p.encode("utf-8", errors="surrogateescape")
