"""A held run claim: the authority to read and write files and run commands."""

from __future__ import annotations

import secrets
import threading
from typing import TYPE_CHECKING, Iterator, Mapping, Sequence

import grpc

from execplane import _call, errors
from execplane._call import duration, new_operation_id
from execplane._proto.execution.v1 import execution_pb2 as pb
from execplane.types import Chunk, CommandInfo, CommandOutput, CommandResult, FileInfo, GrepMatch, GrepResult, path_bytes

if TYPE_CHECKING:
    from execplane.client import Client
    from execplane.environment import Environment

# The run claim's TTL bounds (the server's) and default, in seconds.
MIN_RUN_TTL, MAX_RUN_TTL, DEFAULT_RUN_TTL = 30.0, 300.0, 60.0
# Bounds the release on close, even when the caller is on its way out.
_RELEASE_TIMEOUT = 10.0
# A foreground command's call lasts its timeout plus this grace (the helper's kill and the
# answer's way back).
_COMMAND_GRACE = 15.0
# A foreground command with no timeout of its own runs for at most the profile's maximum
# (at most an hour); the call waits that long.
_COMMAND_MAX = 3600.0

# Answers that prove the claim is gone for good: renewal stops, later calls fail the same way.
_ENDED = (errors.StaleEpoch, errors.Revoked, errors.RunClaimHeld, errors.NotFound, errors.Fenced, errors.GrantInvalid)


class RunClosed(Exception):
    """The run was closed (released)."""


class Run:
    """A held run claim. Use it as a context manager: the claim is released on exit. Safe
    for concurrent use from threads."""

    def __init__(self, client: Client, env: Environment, run_id: str, ttl: float, claim: pb.RunClaim, grant: pb.Grant, *, renew: bool) -> None:
        self._client = client
        self.environment = env
        self.id = run_id
        self._ttl = ttl
        self._lock = threading.Lock()
        self._claim = claim
        self._grant = grant
        self._lost: BaseException | None = None
        self._stop = threading.Event()
        self._closed = False
        self._renewer: threading.Thread | None = None
        if renew:
            self._renewer = threading.Thread(target=self._renew_loop, name=f"execplane-renew-{run_id}", daemon=True)
            self._renewer.start()

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def claim(self) -> pb.RunClaim:
        with self._lock:
            return self._claim

    @property
    def epoch(self) -> int:
        return self.claim.epoch

    @property
    def error(self) -> BaseException | None:
        """Why the run ended (the claim was lost, or the run closed); None while it is held."""
        with self._lock:
            return self._lost

    def _run_grant(self) -> pb.Grant:
        with self._lock:
            if self._lost is not None:
                raise self._lost
            return self._grant

    def renew(self) -> None:
        """Extends the claim by its TTL and refreshes the run grant."""
        req = pb.RenewRunRequest(operation_id=new_operation_id(), run_grant=self._run_grant(), environment=self.environment.ref,
                                 ttl=duration(self._ttl))
        try:
            resp = self._client.call(_call.Safety.IDEMPOTENT, self._client.api.RenewRun, req, timeout=self._ttl / 3)
        except _ENDED as e:
            with self._lock:
                self._lost = e
            raise
        with self._lock:
            self._claim, self._grant = resp.run, resp.run_grant

    def _renew_loop(self) -> None:
        while not self._stop.wait(self._ttl / 3):
            if self._client.closed:
                return
            try:
                self.renew()
            except errors.ExecplaneError:
                pass  # transient: the next tick tries again; a lost claim is recorded
            except RunClosed:
                return
            if self.error is not None:
                return

    def close(self) -> None:
        """Stops the renewal and releases the claim (within 10 s). Idempotent; a claim known
        to be gone is not released again."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            lost, grant = self._lost, self._grant
            self._lost = RunClosed(f"execplane: run {self.id} was closed")
        self._stop.set()
        if self._renewer is not None and self._renewer is not threading.current_thread():
            self._renewer.join()
        if lost is not None:
            return
        req = pb.ReleaseRunRequest(operation_id=new_operation_id(), run_grant=grant, environment=self.environment.ref)
        resp = self._client.call(_call.Safety.IDEMPOTENT, self._client.api.ReleaseRun, req, timeout=_RELEASE_TIMEOUT)
        self.environment._set(resp.environment)

    # Files.

    def _files(self, safety: _call.Safety, op: pb.FileOperation, timeout: float | None = None) -> pb.FileResult:
        req = pb.FilesRequest(run_grant=self._run_grant(), environment=self.environment.ref, operation=op)
        return self._client.call(safety, self._client.api.Files, req, timeout=timeout).result

    def read_range(self, path: str, offset: int = 0, length: int = 0) -> Chunk:
        """Up to length bytes at offset (0: as much as one call carries, the profile's
        maxFileBytes)."""
        res = self._files(_call.Safety.IDEMPOTENT, pb.FileOperation(read=pb.ReadFile(path=path_bytes(path), offset=offset, length=length)))
        return Chunk(content=res.read.content, info=FileInfo.of(res.read.info), more=res.read.more)

    def read_file(self, path: str) -> bytes:
        """The whole file, in as many calls as it takes; VersionMismatch if it changed
        between them."""
        parts: list[bytes] = []
        offset, version = 0, None
        while True:
            c = self.read_range(path, offset)
            if version is not None and c.info.version != version:
                raise errors.new_error(grpc.StatusCode.ABORTED, "VERSION_MISMATCH", f"{path} changed while it was read")
            version = c.info.version
            parts.append(c.content)
            offset += len(c.content)
            if not c.more or not c.content:
                return b"".join(parts)

    def write_file(self, path: str, content: bytes | str, *, if_version: str = "", create_only: bool = False,
                   create_parents: bool = False, mode: int = 0) -> FileInfo:
        """Replaces the file's content atomically (the old content stays intact on any
        failure). With if_version, only if the file still has that version
        (VersionMismatch otherwise); with create_only, only if it does not exist
        (AlreadyExists otherwise). Retried only when the server says nothing was done."""
        if if_version and create_only:
            raise ValueError("if_version and create_only exclude each other")
        data = content.encode() if isinstance(content, str) else content
        w = pb.WriteFile(path=path_bytes(path), content=data, mode=pb.WRITE_MODE_OVERWRITE, create_parents=create_parents, file_mode=mode)
        if if_version:
            w.mode, w.expected_version = pb.WRITE_MODE_COMPARE_AND_SWAP, if_version
        elif create_only:
            w.mode = pb.WRITE_MODE_CREATE_ONLY
        res = self._files(_call.Safety.SERVER_SAYS_SO, pb.FileOperation(write=w))
        return FileInfo.of(res.write.info)

    def stat(self, path: str) -> FileInfo:
        return FileInfo.of(self._files(_call.Safety.IDEMPOTENT, pb.FileOperation(stat=pb.StatFile(path=path_bytes(path)))).stat.info)

    def list_dir(self, path: str = "") -> Iterator[FileInfo]:
        """The directory's entries, page by page."""
        token = b""
        while True:
            res = self._files(_call.Safety.IDEMPOTENT, pb.FileOperation(list=pb.ListDirectory(path=path_bytes(path), page_token=token))).list
            for e in res.entries:
                yield FileInfo.of(e)
            token = res.next_page_token
            if not token:
                return

    def mkdir(self, path: str, *, parents: bool = False) -> FileInfo:
        res = self._files(_call.Safety.SERVER_SAYS_SO, pb.FileOperation(mkdir=pb.MakeDirectory(path=path_bytes(path), parents=parents)))
        return FileInfo.of(res.mkdir.info)

    def remove(self, path: str, *, recursive: bool = False, missing_ok: bool = False) -> int:
        """Removes a file or an empty directory (recursive: a tree); the count removed."""
        res = self._files(_call.Safety.SERVER_SAYS_SO, pb.FileOperation(remove=pb.RemovePath(path=path_bytes(path), recursive=recursive, missing_ok=missing_ok)))
        return res.remove.removed

    def rename(self, src: str, dst: str, *, overwrite: bool = False) -> FileInfo:
        res = self._files(_call.Safety.SERVER_SAYS_SO, pb.FileOperation(rename=pb.RenamePath(**{"from": path_bytes(src)}, to=path_bytes(dst), overwrite=overwrite)))
        return FileInfo.of(res.rename.info)

    def glob(self, pattern: str, base: str = "") -> tuple[list[str], bool]:
        """Paths matching pattern ('**' for any depth), sorted, and whether more matched."""
        res = self._files(_call.Safety.IDEMPOTENT, pb.FileOperation(glob=pb.Glob(pattern=path_bytes(pattern), base=path_bytes(base)))).glob
        return [p.decode("utf-8", errors="surrogateescape") for p in res.paths], res.truncated

    def grep(self, pattern: str, path: str = "", *, include: str = "", ignore_case: bool = False, max_matches: int = 0) -> GrepResult:
        """Matches of an RE2 expression, line by line."""
        res = self._files(_call.Safety.IDEMPOTENT, pb.FileOperation(grep=pb.Grep(pattern=pattern, path=path_bytes(path), include=path_bytes(include),
                                                                               ignore_case=ignore_case, max_matches=max_matches))).grep
        return GrepResult(matches=[GrepMatch(path=m.path.decode("utf-8", errors="surrogateescape"), line=m.line_number,
                                             text=m.line.decode("utf-8", errors="replace")) for m in res.matches],
                          truncated=res.truncated, files_searched=res.files_searched, files_skipped=res.files_skipped)

    # Commands.

    def run(self, argv: Sequence[str] | None = None, *, shell: str = "", cwd: str = "", env: Mapping[str, str] | None = None,
            stdin: bytes | str = b"", timeout: float = 0) -> CommandResult:
        """Runs a command (argv, or a shell script) to its end and returns how it ended. A
        command is never retried once it may have started: OutcomeUnknown means it may have
        run."""
        spec = _spec(argv, shell, cwd, env, stdin, timeout)
        req = pb.StartCommandRequest(run_grant=self._run_grant(), environment=self.environment.ref, command=spec)
        resp = self._client.call(_call.Safety.SERVER_SAYS_SO, self._client.api.StartCommand, req,
                                 timeout=(timeout or _COMMAND_MAX) + _COMMAND_GRACE)
        return CommandResult.of(resp.result)

    def start(self, argv: Sequence[str] | None = None, *, shell: str = "", cwd: str = "", env: Mapping[str, str] | None = None,
              stdin: bytes | str = b"", timeout: float = 0, command_id: str = "") -> CommandInfo:
        """Starts a durable command that outlives this call (and this process); its output is
        kept on the volume. Starting the same command_id with the same command again answers
        the command the first start started — which is what makes it safe to retry."""
        spec = _spec(argv, shell, cwd, env, stdin, timeout)
        req = pb.StartCommandRequest(run_grant=self._run_grant(), environment=self.environment.ref, command=spec, detach=True,
                                     command_id=command_id or "cmd-" + secrets.token_hex(10))
        return CommandInfo.of(self._client.call(_call.Safety.IDEMPOTENT, self._client.api.StartCommand, req).command)

    def command_status(self, command_id: str, *, stdout_from: int = 0, stderr_from: int = 0, max_bytes: int = 0) -> tuple[CommandInfo, CommandOutput]:
        """A durable command's record and up to max_bytes of its output from the offsets (0:
        1 MiB)."""
        req = pb.CommandStatusRequest(run_grant=self._run_grant(), environment=self.environment.ref, command_id=command_id,
                                      max_output_bytes=max_bytes, **{"from": pb.OutputCursor(stdout=stdout_from, stderr=stderr_from)})
        resp = self._client.call(_call.Safety.IDEMPOTENT, self._client.api.CommandStatus, req)
        out, err = bytearray(), bytearray()
        nxt_out, nxt_err, skipped = stdout_from, stderr_from, 0
        for c in resp.output:
            skipped += c.skipped
            if c.stream == pb.OUTPUT_STREAM_STDERR:
                err += c.data
                nxt_err = max(nxt_err, c.offset + len(c.data))
            else:
                out += c.data
                nxt_out = max(nxt_out, c.offset + len(c.data))
        info = CommandInfo.of(resp.command)
        return info, CommandOutput(stdout=bytes(out), stderr=bytes(err), next_stdout=nxt_out, next_stderr=nxt_err, skipped=skipped)

    def cancel(self, command_id: str, *, grace: float = 0) -> CommandInfo:
        """Stops a running command: SIGTERM to its process group, SIGKILL after grace (0: the
        server's default)."""
        req = pb.CancelCommandRequest(run_grant=self._run_grant(), environment=self.environment.ref, command_id=command_id)
        if grace > 0:
            req.grace.CopyFrom(duration(grace))
        return CommandInfo.of(self._client.call(_call.Safety.IDEMPOTENT, self._client.api.CancelCommand, req).command)


def _spec(argv: Sequence[str] | None, shell: str, cwd: str, env: Mapping[str, str] | None, stdin: bytes | str, timeout: float) -> pb.CommandSpec:
    if (not shell) == (not argv):
        raise ValueError("give either argv or shell")
    spec = pb.CommandSpec(working_directory=path_bytes(cwd), stdin=stdin.encode() if isinstance(stdin, str) else stdin,
                          environment=[pb.EnvironmentVariable(name=k, value=v) for k, v in sorted((env or {}).items())])
    if shell:
        spec.shell = shell
    else:
        spec.argv.args.extend(argv or [])
    if timeout > 0:
        spec.timeout.CopyFrom(duration(timeout))
    return spec
