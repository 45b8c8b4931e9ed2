from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

COMMAND_STATE_ABANDONED: CommandState
COMMAND_STATE_CANCELLED: CommandState
COMMAND_STATE_FAILED: CommandState
COMMAND_STATE_OUT_OF_MEMORY: CommandState
COMMAND_STATE_RUNNING: CommandState
COMMAND_STATE_SIGNALED: CommandState
COMMAND_STATE_START_FAILED: CommandState
COMMAND_STATE_SUCCEEDED: CommandState
COMMAND_STATE_TIMED_OUT: CommandState
COMMAND_STATE_UNSPECIFIED: CommandState
DEADLINE_ACTION_DELETE: DeadlineAction
DEADLINE_ACTION_SUSPEND: DeadlineAction
DEADLINE_ACTION_UNSPECIFIED: DeadlineAction
DESCRIPTOR: _descriptor.FileDescriptor
ERROR_REASON_ALREADY_EXISTS: ErrorReason
ERROR_REASON_CONFLICT: ErrorReason
ERROR_REASON_FENCED: ErrorReason
ERROR_REASON_GRANT_INVALID: ErrorReason
ERROR_REASON_INTERNAL: ErrorReason
ERROR_REASON_INVALID_ARGUMENT: ErrorReason
ERROR_REASON_LIMIT_EXCEEDED: ErrorReason
ERROR_REASON_NOT_FOUND: ErrorReason
ERROR_REASON_NOT_READY: ErrorReason
ERROR_REASON_OPERATION_ID_REUSED: ErrorReason
ERROR_REASON_OUTCOME_UNKNOWN: ErrorReason
ERROR_REASON_PATH_ESCAPE: ErrorReason
ERROR_REASON_PERMISSION_DENIED: ErrorReason
ERROR_REASON_PRECONDITION_MISMATCH: ErrorReason
ERROR_REASON_QUOTA_EXCEEDED: ErrorReason
ERROR_REASON_RECORD_UNVERIFIED: ErrorReason
ERROR_REASON_REVOKED: ErrorReason
ERROR_REASON_RUN_CLAIM_HELD: ErrorReason
ERROR_REASON_STALE_EPOCH: ErrorReason
ERROR_REASON_UNAUTHENTICATED: ErrorReason
ERROR_REASON_UNAVAILABLE: ErrorReason
ERROR_REASON_UNIMPLEMENTED: ErrorReason
ERROR_REASON_UNSPECIFIED: ErrorReason
ERROR_REASON_VERSION_MISMATCH: ErrorReason
ERROR_REASON_WRONG_TYPE: ErrorReason
FENCE_STATE_FENCE_UNKNOWN: FenceState
FENCE_STATE_HEALTHY: FenceState
FENCE_STATE_UNSPECIFIED: FenceState
FILE_TYPE_DIRECTORY: FileType
FILE_TYPE_OTHER: FileType
FILE_TYPE_REGULAR: FileType
FILE_TYPE_SYMLINK: FileType
FILE_TYPE_UNSPECIFIED: FileType
LIFECYCLE_STATE_DEGRADED: LifecycleState
LIFECYCLE_STATE_DELETED: LifecycleState
LIFECYCLE_STATE_DELETING: LifecycleState
LIFECYCLE_STATE_PROVISIONING: LifecycleState
LIFECYCLE_STATE_READY: LifecycleState
LIFECYCLE_STATE_REPLACING: LifecycleState
LIFECYCLE_STATE_RESUMING: LifecycleState
LIFECYCLE_STATE_RETIRED: LifecycleState
LIFECYCLE_STATE_RETIRING: LifecycleState
LIFECYCLE_STATE_SUSPENDED: LifecycleState
LIFECYCLE_STATE_SUSPENDING: LifecycleState
LIFECYCLE_STATE_UNSPECIFIED: LifecycleState
OUTPUT_STREAM_STDERR: OutputStream
OUTPUT_STREAM_STDOUT: OutputStream
OUTPUT_STREAM_UNSPECIFIED: OutputStream
REFERENCE_STATE_PENDING_CREATE: ReferenceState
REFERENCE_STATE_PENDING_DELETE: ReferenceState
REFERENCE_STATE_PUBLISHED: ReferenceState
REFERENCE_STATE_RESERVED_SUCCESSOR: ReferenceState
REFERENCE_STATE_UNSPECIFIED: ReferenceState
SNAPSHOT_METHOD_COPY: SnapshotMethod
SNAPSHOT_METHOD_CSI: SnapshotMethod
SNAPSHOT_METHOD_UNSPECIFIED: SnapshotMethod
SNAPSHOT_STATE_CUTTING: SnapshotState
SNAPSHOT_STATE_DELETING: SnapshotState
SNAPSHOT_STATE_FAILED: SnapshotState
SNAPSHOT_STATE_PENDING: SnapshotState
SNAPSHOT_STATE_READY: SnapshotState
SNAPSHOT_STATE_UNSPECIFIED: SnapshotState
USAGE_GRANULARITY_DAY: UsageGranularity
USAGE_GRANULARITY_HOUR: UsageGranularity
USAGE_GRANULARITY_TOTAL: UsageGranularity
USAGE_GRANULARITY_UNSPECIFIED: UsageGranularity
USAGE_GROUP_BY_BINDING: UsageGroupBy
USAGE_GROUP_BY_CLIENT: UsageGroupBy
USAGE_GROUP_BY_ENVIRONMENT: UsageGroupBy
USAGE_GROUP_BY_NONE: UsageGroupBy
USAGE_GROUP_BY_OWNER: UsageGroupBy
USAGE_GROUP_BY_UNSPECIFIED: UsageGroupBy
WRITE_MODE_COMPARE_AND_SWAP: WriteMode
WRITE_MODE_CREATE_ONLY: WriteMode
WRITE_MODE_OVERWRITE: WriteMode
WRITE_MODE_UNSPECIFIED: WriteMode

class AbortReferenceRequest(_message.Message):
    __slots__ = ["operation_id", "target"]
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    operation_id: str
    target: ReferenceTarget
    def __init__(self, operation_id: _Optional[str] = ..., target: _Optional[_Union[ReferenceTarget, _Mapping]] = ...) -> None: ...

class AbortReferenceResponse(_message.Message):
    __slots__ = ["environment"]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    environment: Environment
    def __init__(self, environment: _Optional[_Union[Environment, _Mapping]] = ...) -> None: ...

class AcquireRunRequest(_message.Message):
    __slots__ = ["environment", "environment_grant", "join", "operation_id", "run_id", "ttl"]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_GRANT_FIELD_NUMBER: _ClassVar[int]
    JOIN_FIELD_NUMBER: _ClassVar[int]
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    environment: EnvironmentRef
    environment_grant: Grant
    join: bool
    operation_id: str
    run_id: str
    ttl: _duration_pb2.Duration
    def __init__(self, operation_id: _Optional[str] = ..., environment_grant: _Optional[_Union[Grant, _Mapping]] = ..., environment: _Optional[_Union[EnvironmentRef, _Mapping]] = ..., run_id: _Optional[str] = ..., ttl: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., join: bool = ...) -> None: ...

class AcquireRunResponse(_message.Message):
    __slots__ = ["environment", "run", "run_grant"]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    RUN_GRANT_FIELD_NUMBER: _ClassVar[int]
    environment: Environment
    run: RunClaim
    run_grant: Grant
    def __init__(self, environment: _Optional[_Union[Environment, _Mapping]] = ..., run: _Optional[_Union[RunClaim, _Mapping]] = ..., run_grant: _Optional[_Union[Grant, _Mapping]] = ...) -> None: ...

class AdminPreconditions(_message.Message):
    __slots__ = ["epoch", "grant_generation", "pod_uid", "pvc_uid"]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    GRANT_GENERATION_FIELD_NUMBER: _ClassVar[int]
    POD_UID_FIELD_NUMBER: _ClassVar[int]
    PVC_UID_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    grant_generation: int
    pod_uid: str
    pvc_uid: str
    def __init__(self, epoch: _Optional[int] = ..., pod_uid: _Optional[str] = ..., pvc_uid: _Optional[str] = ..., grant_generation: _Optional[int] = ...) -> None: ...

class Argv(_message.Message):
    __slots__ = ["args"]
    ARGS_FIELD_NUMBER: _ClassVar[int]
    args: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, args: _Optional[_Iterable[str]] = ...) -> None: ...

class AttachEnvironmentRequest(_message.Message):
    __slots__ = ["binding_id", "environment", "owner", "wait_ready"]
    BINDING_ID_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    WAIT_READY_FIELD_NUMBER: _ClassVar[int]
    binding_id: str
    environment: EnvironmentRef
    owner: Owner
    wait_ready: _duration_pb2.Duration
    def __init__(self, owner: _Optional[_Union[Owner, _Mapping]] = ..., binding_id: _Optional[str] = ..., environment: _Optional[_Union[EnvironmentRef, _Mapping]] = ..., wait_ready: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class AttachEnvironmentResponse(_message.Message):
    __slots__ = ["environment", "environment_grant"]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_GRANT_FIELD_NUMBER: _ClassVar[int]
    environment: Environment
    environment_grant: Grant
    def __init__(self, environment: _Optional[_Union[Environment, _Mapping]] = ..., environment_grant: _Optional[_Union[Grant, _Mapping]] = ...) -> None: ...

class CancelCommandRequest(_message.Message):
    __slots__ = ["command_id", "environment", "grace", "run_grant"]
    COMMAND_ID_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    GRACE_FIELD_NUMBER: _ClassVar[int]
    RUN_GRANT_FIELD_NUMBER: _ClassVar[int]
    command_id: str
    environment: EnvironmentRef
    grace: _duration_pb2.Duration
    run_grant: Grant
    def __init__(self, run_grant: _Optional[_Union[Grant, _Mapping]] = ..., environment: _Optional[_Union[EnvironmentRef, _Mapping]] = ..., command_id: _Optional[str] = ..., grace: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class CancelCommandResponse(_message.Message):
    __slots__ = ["command"]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    command: CommandInfo
    def __init__(self, command: _Optional[_Union[CommandInfo, _Mapping]] = ...) -> None: ...

class CancelReferenceDeleteRequest(_message.Message):
    __slots__ = ["operation_id", "target"]
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    operation_id: str
    target: ReferenceTarget
    def __init__(self, operation_id: _Optional[str] = ..., target: _Optional[_Union[ReferenceTarget, _Mapping]] = ...) -> None: ...

class CancelReferenceDeleteResponse(_message.Message):
    __slots__ = ["environment", "reference"]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    REFERENCE_FIELD_NUMBER: _ClassVar[int]
    environment: Environment
    reference: Reference
    def __init__(self, environment: _Optional[_Union[Environment, _Mapping]] = ..., reference: _Optional[_Union[Reference, _Mapping]] = ...) -> None: ...

class CapturedOutput(_message.Message):
    __slots__ = ["head", "tail", "total_bytes", "truncated"]
    HEAD_FIELD_NUMBER: _ClassVar[int]
    TAIL_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    head: bytes
    tail: bytes
    total_bytes: int
    truncated: bool
    def __init__(self, head: _Optional[bytes] = ..., tail: _Optional[bytes] = ..., total_bytes: _Optional[int] = ..., truncated: bool = ...) -> None: ...

class CommandEvent(_message.Message):
    __slots__ = ["ended", "output", "started"]
    ENDED_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    ended: CommandInfo
    output: OutputChunk
    started: CommandInfo
    def __init__(self, started: _Optional[_Union[CommandInfo, _Mapping]] = ..., output: _Optional[_Union[OutputChunk, _Mapping]] = ..., ended: _Optional[_Union[CommandInfo, _Mapping]] = ...) -> None: ...

class CommandInfo(_message.Message):
    __slots__ = ["command_id", "detached", "epoch", "message", "program", "result", "run_id", "started_at", "state", "stderr_bytes", "stdout_bytes", "unverified"]
    COMMAND_ID_FIELD_NUMBER: _ClassVar[int]
    DETACHED_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PROGRAM_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STDERR_BYTES_FIELD_NUMBER: _ClassVar[int]
    STDOUT_BYTES_FIELD_NUMBER: _ClassVar[int]
    UNVERIFIED_FIELD_NUMBER: _ClassVar[int]
    command_id: str
    detached: bool
    epoch: int
    message: str
    program: CommandProgram
    result: CommandResult
    run_id: str
    started_at: _timestamp_pb2.Timestamp
    state: CommandState
    stderr_bytes: int
    stdout_bytes: int
    unverified: bool
    def __init__(self, command_id: _Optional[str] = ..., state: _Optional[_Union[CommandState, str]] = ..., program: _Optional[_Union[CommandProgram, _Mapping]] = ..., run_id: _Optional[str] = ..., epoch: _Optional[int] = ..., started_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., detached: bool = ..., stdout_bytes: _Optional[int] = ..., stderr_bytes: _Optional[int] = ..., result: _Optional[_Union[CommandResult, _Mapping]] = ..., message: _Optional[str] = ..., unverified: bool = ...) -> None: ...

class CommandProgram(_message.Message):
    __slots__ = ["argv", "cut", "shell", "working_directory"]
    ARGV_FIELD_NUMBER: _ClassVar[int]
    CUT_FIELD_NUMBER: _ClassVar[int]
    SHELL_FIELD_NUMBER: _ClassVar[int]
    WORKING_DIRECTORY_FIELD_NUMBER: _ClassVar[int]
    argv: _containers.RepeatedScalarFieldContainer[str]
    cut: bool
    shell: str
    working_directory: bytes
    def __init__(self, argv: _Optional[_Iterable[str]] = ..., shell: _Optional[str] = ..., working_directory: _Optional[bytes] = ..., cut: bool = ...) -> None: ...

class CommandResult(_message.Message):
    __slots__ = ["duration", "exit_code", "message", "receipt", "signal", "started_at", "state", "stderr", "stdout"]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    duration: _duration_pb2.Duration
    exit_code: int
    message: str
    receipt: str
    signal: int
    started_at: _timestamp_pb2.Timestamp
    state: CommandState
    stderr: CapturedOutput
    stdout: CapturedOutput
    def __init__(self, state: _Optional[_Union[CommandState, str]] = ..., exit_code: _Optional[int] = ..., signal: _Optional[int] = ..., stdout: _Optional[_Union[CapturedOutput, _Mapping]] = ..., stderr: _Optional[_Union[CapturedOutput, _Mapping]] = ..., started_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., duration: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., message: _Optional[str] = ..., receipt: _Optional[str] = ...) -> None: ...

class CommandSpec(_message.Message):
    __slots__ = ["argv", "environment", "shell", "stdin", "timeout", "working_directory"]
    ARGV_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    SHELL_FIELD_NUMBER: _ClassVar[int]
    STDIN_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    WORKING_DIRECTORY_FIELD_NUMBER: _ClassVar[int]
    argv: Argv
    environment: _containers.RepeatedCompositeFieldContainer[EnvironmentVariable]
    shell: str
    stdin: bytes
    timeout: _duration_pb2.Duration
    working_directory: bytes
    def __init__(self, argv: _Optional[_Union[Argv, _Mapping]] = ..., shell: _Optional[str] = ..., working_directory: _Optional[bytes] = ..., environment: _Optional[_Iterable[_Union[EnvironmentVariable, _Mapping]]] = ..., stdin: _Optional[bytes] = ..., timeout: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class CommandStatusRequest(_message.Message):
    __slots__ = ["command_id", "environment", "max_output_bytes", "run_grant"]
    COMMAND_ID_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    FROM_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_BYTES_FIELD_NUMBER: _ClassVar[int]
    RUN_GRANT_FIELD_NUMBER: _ClassVar[int]
    command_id: str
    environment: EnvironmentRef
    max_output_bytes: int
    run_grant: Grant
    def __init__(self, run_grant: _Optional[_Union[Grant, _Mapping]] = ..., environment: _Optional[_Union[EnvironmentRef, _Mapping]] = ..., command_id: _Optional[str] = ..., max_output_bytes: _Optional[int] = ..., **kwargs) -> None: ...

class CommandStatusResponse(_message.Message):
    __slots__ = ["command", "output", "result"]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    command: CommandInfo
    output: _containers.RepeatedCompositeFieldContainer[OutputChunk]
    result: CommandResult
    def __init__(self, result: _Optional[_Union[CommandResult, _Mapping]] = ..., command: _Optional[_Union[CommandInfo, _Mapping]] = ..., output: _Optional[_Iterable[_Union[OutputChunk, _Mapping]]] = ...) -> None: ...

class CommitReferenceRequest(_message.Message):
    __slots__ = ["operation_id", "target"]
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    operation_id: str
    target: ReferenceTarget
    def __init__(self, operation_id: _Optional[str] = ..., target: _Optional[_Union[ReferenceTarget, _Mapping]] = ...) -> None: ...

class CommitReferenceResponse(_message.Message):
    __slots__ = ["environment", "reference"]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    REFERENCE_FIELD_NUMBER: _ClassVar[int]
    environment: Environment
    reference: Reference
    def __init__(self, environment: _Optional[_Union[Environment, _Mapping]] = ..., reference: _Optional[_Union[Reference, _Mapping]] = ...) -> None: ...

class ConfirmReferenceDeleteRequest(_message.Message):
    __slots__ = ["operation_id", "target"]
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    operation_id: str
    target: ReferenceTarget
    def __init__(self, operation_id: _Optional[str] = ..., target: _Optional[_Union[ReferenceTarget, _Mapping]] = ...) -> None: ...

class ConfirmReferenceDeleteResponse(_message.Message):
    __slots__ = ["environment"]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    environment: Environment
    def __init__(self, environment: _Optional[_Union[Environment, _Mapping]] = ...) -> None: ...

class CopyPath(_message.Message):
    __slots__ = ["overwrite", "recursive", "to"]
    FROM_FIELD_NUMBER: _ClassVar[int]
    OVERWRITE_FIELD_NUMBER: _ClassVar[int]
    RECURSIVE_FIELD_NUMBER: _ClassVar[int]
    TO_FIELD_NUMBER: _ClassVar[int]
    overwrite: bool
    recursive: bool
    to: bytes
    def __init__(self, to: _Optional[bytes] = ..., overwrite: bool = ..., recursive: bool = ..., **kwargs) -> None: ...

class CopyPathResult(_message.Message):
    __slots__ = ["copied_bytes", "copied_entries", "info"]
    COPIED_BYTES_FIELD_NUMBER: _ClassVar[int]
    COPIED_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    copied_bytes: int
    copied_entries: int
    info: FileInfo
    def __init__(self, info: _Optional[_Union[FileInfo, _Mapping]] = ..., copied_bytes: _Optional[int] = ..., copied_entries: _Optional[int] = ...) -> None: ...

class CreateSnapshotRequest(_message.Message):
    __slots__ = ["name", "operation_id", "target"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    name: str
    operation_id: str
    target: ReferenceTarget
    def __init__(self, operation_id: _Optional[str] = ..., target: _Optional[_Union[ReferenceTarget, _Mapping]] = ..., name: _Optional[str] = ...) -> None: ...

class CreateSnapshotResponse(_message.Message):
    __slots__ = ["snapshot"]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    snapshot: Snapshot
    def __init__(self, snapshot: _Optional[_Union[Snapshot, _Mapping]] = ...) -> None: ...

class Deadline(_message.Message):
    __slots__ = ["action", "after"]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    action: DeadlineAction
    after: _duration_pb2.Duration
    def __init__(self, after: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., action: _Optional[_Union[DeadlineAction, str]] = ...) -> None: ...

class DeleteEnvironmentRequest(_message.Message):
    __slots__ = ["operation_id", "target", "wait"]
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    WAIT_FIELD_NUMBER: _ClassVar[int]
    operation_id: str
    target: ReferenceTarget
    wait: _duration_pb2.Duration
    def __init__(self, operation_id: _Optional[str] = ..., target: _Optional[_Union[ReferenceTarget, _Mapping]] = ..., wait: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class DeleteEnvironmentResponse(_message.Message):
    __slots__ = ["environment"]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    environment: Environment
    def __init__(self, environment: _Optional[_Union[Environment, _Mapping]] = ...) -> None: ...

class DeleteRetiredEnvironmentRequest(_message.Message):
    __slots__ = ["environment", "operation_id", "preconditions", "reason"]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    PRECONDITIONS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    environment: EnvironmentRef
    operation_id: str
    preconditions: AdminPreconditions
    reason: str
    def __init__(self, operation_id: _Optional[str] = ..., environment: _Optional[_Union[EnvironmentRef, _Mapping]] = ..., preconditions: _Optional[_Union[AdminPreconditions, _Mapping]] = ..., reason: _Optional[str] = ...) -> None: ...

class DeleteRetiredEnvironmentResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class DeleteSnapshotRequest(_message.Message):
    __slots__ = ["name", "operation_id", "owner"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    name: str
    operation_id: str
    owner: Owner
    def __init__(self, operation_id: _Optional[str] = ..., owner: _Optional[_Union[Owner, _Mapping]] = ..., name: _Optional[str] = ...) -> None: ...

class DeleteSnapshotResponse(_message.Message):
    __slots__ = ["snapshot"]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    snapshot: Snapshot
    def __init__(self, snapshot: _Optional[_Union[Snapshot, _Mapping]] = ...) -> None: ...

class EnsureEnvironmentRequest(_message.Message):
    __slots__ = ["binding_id", "deadline", "expected_profile_digest", "from_snapshot", "metadata", "operation_id", "owner", "profile"]
    class MetadataEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    BINDING_ID_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_PROFILE_DIGEST_FIELD_NUMBER: _ClassVar[int]
    FROM_SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    binding_id: str
    deadline: Deadline
    expected_profile_digest: str
    from_snapshot: str
    metadata: _containers.ScalarMap[str, str]
    operation_id: str
    owner: Owner
    profile: str
    def __init__(self, operation_id: _Optional[str] = ..., owner: _Optional[_Union[Owner, _Mapping]] = ..., binding_id: _Optional[str] = ..., profile: _Optional[str] = ..., expected_profile_digest: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ..., deadline: _Optional[_Union[Deadline, _Mapping]] = ..., from_snapshot: _Optional[str] = ...) -> None: ...

class EnsureEnvironmentResponse(_message.Message):
    __slots__ = ["created", "environment", "environment_grant"]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_GRANT_FIELD_NUMBER: _ClassVar[int]
    created: bool
    environment: Environment
    environment_grant: Grant
    def __init__(self, environment: _Optional[_Union[Environment, _Mapping]] = ..., environment_grant: _Optional[_Union[Grant, _Mapping]] = ..., created: bool = ...) -> None: ...

class Environment(_message.Message):
    __slots__ = ["active_run", "binding_id", "created_at", "deadline", "deadline_action", "epoch", "fence_state", "grant_generation", "lifecycle", "message", "metadata", "pod_uid", "profile", "profile_digest", "pvc_uid", "ready", "ref", "references", "retained", "schema_version"]
    class MetadataEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ACTIVE_RUN_FIELD_NUMBER: _ClassVar[int]
    BINDING_ID_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_ACTION_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    FENCE_STATE_FIELD_NUMBER: _ClassVar[int]
    GRANT_GENERATION_FIELD_NUMBER: _ClassVar[int]
    LIFECYCLE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    POD_UID_FIELD_NUMBER: _ClassVar[int]
    PROFILE_DIGEST_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    PVC_UID_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    REFERENCES_FIELD_NUMBER: _ClassVar[int]
    REF_FIELD_NUMBER: _ClassVar[int]
    RETAINED_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    active_run: RunClaim
    binding_id: str
    created_at: _timestamp_pb2.Timestamp
    deadline: _timestamp_pb2.Timestamp
    deadline_action: DeadlineAction
    epoch: int
    fence_state: FenceState
    grant_generation: int
    lifecycle: LifecycleState
    message: str
    metadata: _containers.ScalarMap[str, str]
    pod_uid: str
    profile: str
    profile_digest: str
    pvc_uid: str
    ready: bool
    ref: EnvironmentRef
    references: _containers.RepeatedCompositeFieldContainer[Reference]
    retained: bool
    schema_version: int
    def __init__(self, ref: _Optional[_Union[EnvironmentRef, _Mapping]] = ..., binding_id: _Optional[str] = ..., profile: _Optional[str] = ..., profile_digest: _Optional[str] = ..., lifecycle: _Optional[_Union[LifecycleState, str]] = ..., ready: bool = ..., fence_state: _Optional[_Union[FenceState, str]] = ..., epoch: _Optional[int] = ..., grant_generation: _Optional[int] = ..., active_run: _Optional[_Union[RunClaim, _Mapping]] = ..., references: _Optional[_Iterable[_Union[Reference, _Mapping]]] = ..., pod_uid: _Optional[str] = ..., pvc_uid: _Optional[str] = ..., schema_version: _Optional[int] = ..., message: _Optional[str] = ..., created_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., retained: bool = ..., metadata: _Optional[_Mapping[str, str]] = ..., deadline: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., deadline_action: _Optional[_Union[DeadlineAction, str]] = ...) -> None: ...

class EnvironmentRef(_message.Message):
    __slots__ = ["id", "revision"]
    ID_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    id: str
    revision: str
    def __init__(self, id: _Optional[str] = ..., revision: _Optional[str] = ...) -> None: ...

class EnvironmentVariable(_message.Message):
    __slots__ = ["name", "value"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: str
    def __init__(self, name: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class FileInfo(_message.Message):
    __slots__ = ["mode", "modified_at", "path", "size", "symlink_target", "type", "version"]
    MODE_FIELD_NUMBER: _ClassVar[int]
    MODIFIED_AT_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    SYMLINK_TARGET_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    mode: int
    modified_at: _timestamp_pb2.Timestamp
    path: bytes
    size: int
    symlink_target: bytes
    type: FileType
    version: str
    def __init__(self, path: _Optional[bytes] = ..., type: _Optional[_Union[FileType, str]] = ..., size: _Optional[int] = ..., mode: _Optional[int] = ..., modified_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., version: _Optional[str] = ..., symlink_target: _Optional[bytes] = ...) -> None: ...

class FileOperation(_message.Message):
    __slots__ = ["copy", "glob", "grep", "list", "mkdir", "read", "remove", "rename", "stat", "write"]
    COPY_FIELD_NUMBER: _ClassVar[int]
    GLOB_FIELD_NUMBER: _ClassVar[int]
    GREP_FIELD_NUMBER: _ClassVar[int]
    LIST_FIELD_NUMBER: _ClassVar[int]
    MKDIR_FIELD_NUMBER: _ClassVar[int]
    READ_FIELD_NUMBER: _ClassVar[int]
    REMOVE_FIELD_NUMBER: _ClassVar[int]
    RENAME_FIELD_NUMBER: _ClassVar[int]
    STAT_FIELD_NUMBER: _ClassVar[int]
    WRITE_FIELD_NUMBER: _ClassVar[int]
    copy: CopyPath
    glob: Glob
    grep: Grep
    list: ListDirectory
    mkdir: MakeDirectory
    read: ReadFile
    remove: RemovePath
    rename: RenamePath
    stat: StatFile
    write: WriteFile
    def __init__(self, read: _Optional[_Union[ReadFile, _Mapping]] = ..., write: _Optional[_Union[WriteFile, _Mapping]] = ..., stat: _Optional[_Union[StatFile, _Mapping]] = ..., list: _Optional[_Union[ListDirectory, _Mapping]] = ..., mkdir: _Optional[_Union[MakeDirectory, _Mapping]] = ..., remove: _Optional[_Union[RemovePath, _Mapping]] = ..., rename: _Optional[_Union[RenamePath, _Mapping]] = ..., copy: _Optional[_Union[CopyPath, _Mapping]] = ..., glob: _Optional[_Union[Glob, _Mapping]] = ..., grep: _Optional[_Union[Grep, _Mapping]] = ...) -> None: ...

class FileResult(_message.Message):
    __slots__ = ["copy", "glob", "grep", "list", "mkdir", "read", "remove", "rename", "stat", "write"]
    COPY_FIELD_NUMBER: _ClassVar[int]
    GLOB_FIELD_NUMBER: _ClassVar[int]
    GREP_FIELD_NUMBER: _ClassVar[int]
    LIST_FIELD_NUMBER: _ClassVar[int]
    MKDIR_FIELD_NUMBER: _ClassVar[int]
    READ_FIELD_NUMBER: _ClassVar[int]
    REMOVE_FIELD_NUMBER: _ClassVar[int]
    RENAME_FIELD_NUMBER: _ClassVar[int]
    STAT_FIELD_NUMBER: _ClassVar[int]
    WRITE_FIELD_NUMBER: _ClassVar[int]
    copy: CopyPathResult
    glob: GlobResult
    grep: GrepResult
    list: ListDirectoryResult
    mkdir: MakeDirectoryResult
    read: ReadFileResult
    remove: RemovePathResult
    rename: RenamePathResult
    stat: StatFileResult
    write: WriteFileResult
    def __init__(self, read: _Optional[_Union[ReadFileResult, _Mapping]] = ..., write: _Optional[_Union[WriteFileResult, _Mapping]] = ..., stat: _Optional[_Union[StatFileResult, _Mapping]] = ..., list: _Optional[_Union[ListDirectoryResult, _Mapping]] = ..., mkdir: _Optional[_Union[MakeDirectoryResult, _Mapping]] = ..., remove: _Optional[_Union[RemovePathResult, _Mapping]] = ..., rename: _Optional[_Union[RenamePathResult, _Mapping]] = ..., copy: _Optional[_Union[CopyPathResult, _Mapping]] = ..., glob: _Optional[_Union[GlobResult, _Mapping]] = ..., grep: _Optional[_Union[GrepResult, _Mapping]] = ...) -> None: ...

class FilesRequest(_message.Message):
    __slots__ = ["environment", "operation", "run_grant"]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    RUN_GRANT_FIELD_NUMBER: _ClassVar[int]
    environment: EnvironmentRef
    operation: FileOperation
    run_grant: Grant
    def __init__(self, run_grant: _Optional[_Union[Grant, _Mapping]] = ..., environment: _Optional[_Union[EnvironmentRef, _Mapping]] = ..., operation: _Optional[_Union[FileOperation, _Mapping]] = ...) -> None: ...

class FilesResponse(_message.Message):
    __slots__ = ["result"]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    result: FileResult
    def __init__(self, result: _Optional[_Union[FileResult, _Mapping]] = ...) -> None: ...

class GetSnapshotRequest(_message.Message):
    __slots__ = ["name", "owner"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    name: str
    owner: Owner
    def __init__(self, owner: _Optional[_Union[Owner, _Mapping]] = ..., name: _Optional[str] = ...) -> None: ...

class GetSnapshotResponse(_message.Message):
    __slots__ = ["snapshot"]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    snapshot: Snapshot
    def __init__(self, snapshot: _Optional[_Union[Snapshot, _Mapping]] = ...) -> None: ...

class GetUsageRequest(_message.Message):
    __slots__ = ["end", "environment", "granularity", "start"]
    END_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    GRANULARITY_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    end: _timestamp_pb2.Timestamp
    environment: EnvironmentRef
    granularity: UsageGranularity
    start: _timestamp_pb2.Timestamp
    def __init__(self, environment: _Optional[_Union[EnvironmentRef, _Mapping]] = ..., start: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., end: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., granularity: _Optional[_Union[UsageGranularity, str]] = ...) -> None: ...

class GetUsageResponse(_message.Message):
    __slots__ = ["as_of", "binding_id", "client_hash", "ended_at", "environment", "owner_hash", "profile", "totals", "windows"]
    AS_OF_FIELD_NUMBER: _ClassVar[int]
    BINDING_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_HASH_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    OWNER_HASH_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    TOTALS_FIELD_NUMBER: _ClassVar[int]
    WINDOWS_FIELD_NUMBER: _ClassVar[int]
    as_of: _timestamp_pb2.Timestamp
    binding_id: str
    client_hash: str
    ended_at: _timestamp_pb2.Timestamp
    environment: EnvironmentRef
    owner_hash: str
    profile: str
    totals: UsageCounters
    windows: _containers.RepeatedCompositeFieldContainer[UsageWindow]
    def __init__(self, environment: _Optional[_Union[EnvironmentRef, _Mapping]] = ..., binding_id: _Optional[str] = ..., profile: _Optional[str] = ..., totals: _Optional[_Union[UsageCounters, _Mapping]] = ..., windows: _Optional[_Iterable[_Union[UsageWindow, _Mapping]]] = ..., as_of: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., ended_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., owner_hash: _Optional[str] = ..., client_hash: _Optional[str] = ...) -> None: ...

class Glob(_message.Message):
    __slots__ = ["base", "max_results", "pattern"]
    BASE_FIELD_NUMBER: _ClassVar[int]
    MAX_RESULTS_FIELD_NUMBER: _ClassVar[int]
    PATTERN_FIELD_NUMBER: _ClassVar[int]
    base: bytes
    max_results: int
    pattern: bytes
    def __init__(self, pattern: _Optional[bytes] = ..., base: _Optional[bytes] = ..., max_results: _Optional[int] = ...) -> None: ...

class GlobResult(_message.Message):
    __slots__ = ["paths", "truncated"]
    PATHS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    paths: _containers.RepeatedScalarFieldContainer[bytes]
    truncated: bool
    def __init__(self, paths: _Optional[_Iterable[bytes]] = ..., truncated: bool = ...) -> None: ...

class Grant(_message.Message):
    __slots__ = ["expires_at", "token"]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    expires_at: _timestamp_pb2.Timestamp
    token: str
    def __init__(self, token: _Optional[str] = ..., expires_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Grep(_message.Message):
    __slots__ = ["ignore_case", "include", "max_matches", "path", "pattern"]
    IGNORE_CASE_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_FIELD_NUMBER: _ClassVar[int]
    MAX_MATCHES_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    PATTERN_FIELD_NUMBER: _ClassVar[int]
    ignore_case: bool
    include: bytes
    max_matches: int
    path: bytes
    pattern: str
    def __init__(self, pattern: _Optional[str] = ..., path: _Optional[bytes] = ..., include: _Optional[bytes] = ..., ignore_case: bool = ..., max_matches: _Optional[int] = ...) -> None: ...

class GrepMatch(_message.Message):
    __slots__ = ["line", "line_number", "path"]
    LINE_FIELD_NUMBER: _ClassVar[int]
    LINE_NUMBER_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    line: bytes
    line_number: int
    path: bytes
    def __init__(self, path: _Optional[bytes] = ..., line_number: _Optional[int] = ..., line: _Optional[bytes] = ...) -> None: ...

class GrepResult(_message.Message):
    __slots__ = ["files_searched", "files_skipped", "matches", "truncated"]
    FILES_SEARCHED_FIELD_NUMBER: _ClassVar[int]
    FILES_SKIPPED_FIELD_NUMBER: _ClassVar[int]
    MATCHES_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    files_searched: int
    files_skipped: int
    matches: _containers.RepeatedCompositeFieldContainer[GrepMatch]
    truncated: bool
    def __init__(self, matches: _Optional[_Iterable[_Union[GrepMatch, _Mapping]]] = ..., truncated: bool = ..., files_searched: _Optional[int] = ..., files_skipped: _Optional[int] = ...) -> None: ...

class ListCommandsRequest(_message.Message):
    __slots__ = ["environment", "max_commands", "run_grant"]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    MAX_COMMANDS_FIELD_NUMBER: _ClassVar[int]
    RUN_GRANT_FIELD_NUMBER: _ClassVar[int]
    environment: EnvironmentRef
    max_commands: int
    run_grant: Grant
    def __init__(self, run_grant: _Optional[_Union[Grant, _Mapping]] = ..., environment: _Optional[_Union[EnvironmentRef, _Mapping]] = ..., max_commands: _Optional[int] = ...) -> None: ...

class ListCommandsResponse(_message.Message):
    __slots__ = ["commands", "more"]
    COMMANDS_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    commands: _containers.RepeatedCompositeFieldContainer[CommandInfo]
    more: bool
    def __init__(self, commands: _Optional[_Iterable[_Union[CommandInfo, _Mapping]]] = ..., more: bool = ...) -> None: ...

class ListDirectory(_message.Message):
    __slots__ = ["page_size", "page_token", "path"]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: bytes
    path: bytes
    def __init__(self, path: _Optional[bytes] = ..., page_size: _Optional[int] = ..., page_token: _Optional[bytes] = ...) -> None: ...

class ListDirectoryResult(_message.Message):
    __slots__ = ["entries", "next_page_token"]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[FileInfo]
    next_page_token: bytes
    def __init__(self, entries: _Optional[_Iterable[_Union[FileInfo, _Mapping]]] = ..., next_page_token: _Optional[bytes] = ...) -> None: ...

class ListEnvironmentsRequest(_message.Message):
    __slots__ = ["binding_id", "lifecycle", "metadata", "owner", "page_size", "page_token"]
    class MetadataEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    BINDING_ID_FIELD_NUMBER: _ClassVar[int]
    LIFECYCLE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    binding_id: str
    lifecycle: _containers.RepeatedScalarFieldContainer[LifecycleState]
    metadata: _containers.ScalarMap[str, str]
    owner: Owner
    page_size: int
    page_token: str
    def __init__(self, owner: _Optional[_Union[Owner, _Mapping]] = ..., binding_id: _Optional[str] = ..., lifecycle: _Optional[_Iterable[_Union[LifecycleState, str]]] = ..., metadata: _Optional[_Mapping[str, str]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListEnvironmentsResponse(_message.Message):
    __slots__ = ["environments", "next_page_token"]
    ENVIRONMENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    environments: _containers.RepeatedCompositeFieldContainer[Environment]
    next_page_token: str
    def __init__(self, environments: _Optional[_Iterable[_Union[Environment, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListReferenceIntentsRequest(_message.Message):
    __slots__ = ["owner", "page_size", "page_token"]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    owner: Owner
    page_size: int
    page_token: str
    def __init__(self, owner: _Optional[_Union[Owner, _Mapping]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListReferenceIntentsResponse(_message.Message):
    __slots__ = ["intents", "next_page_token"]
    INTENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    intents: _containers.RepeatedCompositeFieldContainer[ReferenceIntent]
    next_page_token: str
    def __init__(self, intents: _Optional[_Iterable[_Union[ReferenceIntent, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListSnapshotsRequest(_message.Message):
    __slots__ = ["owner"]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    owner: Owner
    def __init__(self, owner: _Optional[_Union[Owner, _Mapping]] = ...) -> None: ...

class ListSnapshotsResponse(_message.Message):
    __slots__ = ["snapshots"]
    SNAPSHOTS_FIELD_NUMBER: _ClassVar[int]
    snapshots: _containers.RepeatedCompositeFieldContainer[Snapshot]
    def __init__(self, snapshots: _Optional[_Iterable[_Union[Snapshot, _Mapping]]] = ...) -> None: ...

class ListUsageRequest(_message.Message):
    __slots__ = ["all_clients", "binding_id", "client", "end", "granularity", "group_by", "owner", "page_size", "page_token", "start"]
    ALL_CLIENTS_FIELD_NUMBER: _ClassVar[int]
    BINDING_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    GRANULARITY_FIELD_NUMBER: _ClassVar[int]
    GROUP_BY_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    all_clients: bool
    binding_id: str
    client: str
    end: _timestamp_pb2.Timestamp
    granularity: UsageGranularity
    group_by: UsageGroupBy
    owner: Owner
    page_size: int
    page_token: str
    start: _timestamp_pb2.Timestamp
    def __init__(self, owner: _Optional[_Union[Owner, _Mapping]] = ..., binding_id: _Optional[str] = ..., client: _Optional[str] = ..., all_clients: bool = ..., start: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., end: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., granularity: _Optional[_Union[UsageGranularity, str]] = ..., group_by: _Optional[_Union[UsageGroupBy, str]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListUsageResponse(_message.Message):
    __slots__ = ["as_of", "next_page_token", "records"]
    AS_OF_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    as_of: _timestamp_pb2.Timestamp
    next_page_token: str
    records: _containers.RepeatedCompositeFieldContainer[UsageRecord]
    def __init__(self, records: _Optional[_Iterable[_Union[UsageRecord, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., as_of: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class MakeDirectory(_message.Message):
    __slots__ = ["mode", "parents", "path"]
    MODE_FIELD_NUMBER: _ClassVar[int]
    PARENTS_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    mode: int
    parents: bool
    path: bytes
    def __init__(self, path: _Optional[bytes] = ..., parents: bool = ..., mode: _Optional[int] = ...) -> None: ...

class MakeDirectoryResult(_message.Message):
    __slots__ = ["info"]
    INFO_FIELD_NUMBER: _ClassVar[int]
    info: FileInfo
    def __init__(self, info: _Optional[_Union[FileInfo, _Mapping]] = ...) -> None: ...

class MigrateEnvironmentRequest(_message.Message):
    __slots__ = ["environment", "operation_id", "preconditions", "target_schema_version"]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    PRECONDITIONS_FIELD_NUMBER: _ClassVar[int]
    TARGET_SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    environment: EnvironmentRef
    operation_id: str
    preconditions: AdminPreconditions
    target_schema_version: int
    def __init__(self, operation_id: _Optional[str] = ..., environment: _Optional[_Union[EnvironmentRef, _Mapping]] = ..., preconditions: _Optional[_Union[AdminPreconditions, _Mapping]] = ..., target_schema_version: _Optional[int] = ...) -> None: ...

class MigrateEnvironmentResponse(_message.Message):
    __slots__ = ["environment", "migrated"]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    MIGRATED_FIELD_NUMBER: _ClassVar[int]
    environment: Environment
    migrated: bool
    def __init__(self, environment: _Optional[_Union[Environment, _Mapping]] = ..., migrated: bool = ...) -> None: ...

class OutputChunk(_message.Message):
    __slots__ = ["data", "offset", "skipped", "stream"]
    DATA_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    offset: int
    skipped: int
    stream: OutputStream
    def __init__(self, stream: _Optional[_Union[OutputStream, str]] = ..., offset: _Optional[int] = ..., data: _Optional[bytes] = ..., skipped: _Optional[int] = ...) -> None: ...

class OutputCursor(_message.Message):
    __slots__ = ["stderr", "stdout"]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    stderr: int
    stdout: int
    def __init__(self, stdout: _Optional[int] = ..., stderr: _Optional[int] = ...) -> None: ...

class Owner(_message.Message):
    __slots__ = ["issuer", "subject"]
    ISSUER_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    issuer: str
    subject: str
    def __init__(self, issuer: _Optional[str] = ..., subject: _Optional[str] = ...) -> None: ...

class PrepareReferenceDeleteRequest(_message.Message):
    __slots__ = ["operation_id", "target"]
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    operation_id: str
    target: ReferenceTarget
    def __init__(self, operation_id: _Optional[str] = ..., target: _Optional[_Union[ReferenceTarget, _Mapping]] = ...) -> None: ...

class PrepareReferenceDeleteResponse(_message.Message):
    __slots__ = ["environment", "reference"]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    REFERENCE_FIELD_NUMBER: _ClassVar[int]
    environment: Environment
    reference: Reference
    def __init__(self, environment: _Optional[_Union[Environment, _Mapping]] = ..., reference: _Optional[_Union[Reference, _Mapping]] = ...) -> None: ...

class Profile(_message.Message):
    __slots__ = ["capabilities", "digest", "max_command_bytes", "max_command_duration", "max_file_bytes", "name"]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    MAX_COMMAND_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_COMMAND_DURATION_FIELD_NUMBER: _ClassVar[int]
    MAX_FILE_BYTES_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    capabilities: _containers.RepeatedScalarFieldContainer[str]
    digest: str
    max_command_bytes: int
    max_command_duration: _duration_pb2.Duration
    max_file_bytes: int
    name: str
    def __init__(self, name: _Optional[str] = ..., digest: _Optional[str] = ..., max_file_bytes: _Optional[int] = ..., max_command_bytes: _Optional[int] = ..., max_command_duration: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., capabilities: _Optional[_Iterable[str]] = ...) -> None: ...

class ReadFile(_message.Message):
    __slots__ = ["length", "offset", "path"]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    length: int
    offset: int
    path: bytes
    def __init__(self, path: _Optional[bytes] = ..., offset: _Optional[int] = ..., length: _Optional[int] = ...) -> None: ...

class ReadFileResult(_message.Message):
    __slots__ = ["content", "info", "more"]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    content: bytes
    info: FileInfo
    more: bool
    def __init__(self, content: _Optional[bytes] = ..., info: _Optional[_Union[FileInfo, _Mapping]] = ..., more: bool = ...) -> None: ...

class ReadFileStreamRequest(_message.Message):
    __slots__ = ["environment", "read", "run_grant"]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    READ_FIELD_NUMBER: _ClassVar[int]
    RUN_GRANT_FIELD_NUMBER: _ClassVar[int]
    environment: EnvironmentRef
    read: ReadFile
    run_grant: Grant
    def __init__(self, run_grant: _Optional[_Union[Grant, _Mapping]] = ..., environment: _Optional[_Union[EnvironmentRef, _Mapping]] = ..., read: _Optional[_Union[ReadFile, _Mapping]] = ...) -> None: ...

class ReadFileStreamResponse(_message.Message):
    __slots__ = ["content", "result"]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    content: bytes
    result: ReadFileResult
    def __init__(self, content: _Optional[bytes] = ..., result: _Optional[_Union[ReadFileResult, _Mapping]] = ...) -> None: ...

class RecoverEnvironmentRequest(_message.Message):
    __slots__ = ["environment", "operation_id", "preconditions", "reason"]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    PRECONDITIONS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    environment: EnvironmentRef
    operation_id: str
    preconditions: AdminPreconditions
    reason: str
    def __init__(self, operation_id: _Optional[str] = ..., environment: _Optional[_Union[EnvironmentRef, _Mapping]] = ..., preconditions: _Optional[_Union[AdminPreconditions, _Mapping]] = ..., reason: _Optional[str] = ...) -> None: ...

class RecoverEnvironmentResponse(_message.Message):
    __slots__ = ["environment"]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    environment: Environment
    def __init__(self, environment: _Optional[_Union[Environment, _Mapping]] = ...) -> None: ...

class Reference(_message.Message):
    __slots__ = ["binding_id", "operation_id", "source_binding_id", "state", "updated_at"]
    BINDING_ID_FIELD_NUMBER: _ClassVar[int]
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_BINDING_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    binding_id: str
    operation_id: str
    source_binding_id: str
    state: ReferenceState
    updated_at: _timestamp_pb2.Timestamp
    def __init__(self, binding_id: _Optional[str] = ..., state: _Optional[_Union[ReferenceState, str]] = ..., source_binding_id: _Optional[str] = ..., operation_id: _Optional[str] = ..., updated_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ReferenceIntent(_message.Message):
    __slots__ = ["environment", "reference"]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    REFERENCE_FIELD_NUMBER: _ClassVar[int]
    environment: EnvironmentRef
    reference: Reference
    def __init__(self, environment: _Optional[_Union[EnvironmentRef, _Mapping]] = ..., reference: _Optional[_Union[Reference, _Mapping]] = ...) -> None: ...

class ReferenceTarget(_message.Message):
    __slots__ = ["binding_id", "environment", "owner"]
    BINDING_ID_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    binding_id: str
    environment: EnvironmentRef
    owner: Owner
    def __init__(self, owner: _Optional[_Union[Owner, _Mapping]] = ..., environment: _Optional[_Union[EnvironmentRef, _Mapping]] = ..., binding_id: _Optional[str] = ...) -> None: ...

class ReleaseReferenceRequest(_message.Message):
    __slots__ = ["operation_id", "target"]
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    operation_id: str
    target: ReferenceTarget
    def __init__(self, operation_id: _Optional[str] = ..., target: _Optional[_Union[ReferenceTarget, _Mapping]] = ...) -> None: ...

class ReleaseReferenceResponse(_message.Message):
    __slots__ = ["environment"]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    environment: Environment
    def __init__(self, environment: _Optional[_Union[Environment, _Mapping]] = ...) -> None: ...

class ReleaseRunRequest(_message.Message):
    __slots__ = ["environment", "operation_id", "run_grant"]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_GRANT_FIELD_NUMBER: _ClassVar[int]
    environment: EnvironmentRef
    operation_id: str
    run_grant: Grant
    def __init__(self, operation_id: _Optional[str] = ..., run_grant: _Optional[_Union[Grant, _Mapping]] = ..., environment: _Optional[_Union[EnvironmentRef, _Mapping]] = ...) -> None: ...

class ReleaseRunResponse(_message.Message):
    __slots__ = ["environment"]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    environment: Environment
    def __init__(self, environment: _Optional[_Union[Environment, _Mapping]] = ...) -> None: ...

class RemovePath(_message.Message):
    __slots__ = ["missing_ok", "path", "recursive"]
    MISSING_OK_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    RECURSIVE_FIELD_NUMBER: _ClassVar[int]
    missing_ok: bool
    path: bytes
    recursive: bool
    def __init__(self, path: _Optional[bytes] = ..., recursive: bool = ..., missing_ok: bool = ...) -> None: ...

class RemovePathResult(_message.Message):
    __slots__ = ["removed"]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    removed: int
    def __init__(self, removed: _Optional[int] = ...) -> None: ...

class RenamePath(_message.Message):
    __slots__ = ["overwrite", "to"]
    FROM_FIELD_NUMBER: _ClassVar[int]
    OVERWRITE_FIELD_NUMBER: _ClassVar[int]
    TO_FIELD_NUMBER: _ClassVar[int]
    overwrite: bool
    to: bytes
    def __init__(self, to: _Optional[bytes] = ..., overwrite: bool = ..., **kwargs) -> None: ...

class RenamePathResult(_message.Message):
    __slots__ = ["info"]
    INFO_FIELD_NUMBER: _ClassVar[int]
    info: FileInfo
    def __init__(self, info: _Optional[_Union[FileInfo, _Mapping]] = ...) -> None: ...

class RenewRunRequest(_message.Message):
    __slots__ = ["environment", "operation_id", "run_grant", "ttl"]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_GRANT_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    environment: EnvironmentRef
    operation_id: str
    run_grant: Grant
    ttl: _duration_pb2.Duration
    def __init__(self, operation_id: _Optional[str] = ..., run_grant: _Optional[_Union[Grant, _Mapping]] = ..., environment: _Optional[_Union[EnvironmentRef, _Mapping]] = ..., ttl: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class RenewRunResponse(_message.Message):
    __slots__ = ["run", "run_grant"]
    RUN_FIELD_NUMBER: _ClassVar[int]
    RUN_GRANT_FIELD_NUMBER: _ClassVar[int]
    run: RunClaim
    run_grant: Grant
    def __init__(self, run: _Optional[_Union[RunClaim, _Mapping]] = ..., run_grant: _Optional[_Union[Grant, _Mapping]] = ...) -> None: ...

class ReplaceExecutorRequest(_message.Message):
    __slots__ = ["environment", "operation_id", "preconditions", "reason"]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    PRECONDITIONS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    environment: EnvironmentRef
    operation_id: str
    preconditions: AdminPreconditions
    reason: str
    def __init__(self, operation_id: _Optional[str] = ..., environment: _Optional[_Union[EnvironmentRef, _Mapping]] = ..., preconditions: _Optional[_Union[AdminPreconditions, _Mapping]] = ..., reason: _Optional[str] = ...) -> None: ...

class ReplaceExecutorResponse(_message.Message):
    __slots__ = ["environment"]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    environment: Environment
    def __init__(self, environment: _Optional[_Union[Environment, _Mapping]] = ...) -> None: ...

class ReserveSuccessorRequest(_message.Message):
    __slots__ = ["environment", "operation_id", "owner", "source_binding_id", "successor_binding_id"]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    SOURCE_BINDING_ID_FIELD_NUMBER: _ClassVar[int]
    SUCCESSOR_BINDING_ID_FIELD_NUMBER: _ClassVar[int]
    environment: EnvironmentRef
    operation_id: str
    owner: Owner
    source_binding_id: str
    successor_binding_id: str
    def __init__(self, operation_id: _Optional[str] = ..., owner: _Optional[_Union[Owner, _Mapping]] = ..., environment: _Optional[_Union[EnvironmentRef, _Mapping]] = ..., source_binding_id: _Optional[str] = ..., successor_binding_id: _Optional[str] = ...) -> None: ...

class ReserveSuccessorResponse(_message.Message):
    __slots__ = ["environment", "reference"]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    REFERENCE_FIELD_NUMBER: _ClassVar[int]
    environment: Environment
    reference: Reference
    def __init__(self, environment: _Optional[_Union[Environment, _Mapping]] = ..., reference: _Optional[_Union[Reference, _Mapping]] = ...) -> None: ...

class ResumeEnvironmentRequest(_message.Message):
    __slots__ = ["operation_id", "target"]
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    operation_id: str
    target: ReferenceTarget
    def __init__(self, operation_id: _Optional[str] = ..., target: _Optional[_Union[ReferenceTarget, _Mapping]] = ...) -> None: ...

class ResumeEnvironmentResponse(_message.Message):
    __slots__ = ["environment"]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    environment: Environment
    def __init__(self, environment: _Optional[_Union[Environment, _Mapping]] = ...) -> None: ...

class RetireEnvironmentRequest(_message.Message):
    __slots__ = ["environment", "operation_id", "preconditions", "reason"]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    PRECONDITIONS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    environment: EnvironmentRef
    operation_id: str
    preconditions: AdminPreconditions
    reason: str
    def __init__(self, operation_id: _Optional[str] = ..., environment: _Optional[_Union[EnvironmentRef, _Mapping]] = ..., preconditions: _Optional[_Union[AdminPreconditions, _Mapping]] = ..., reason: _Optional[str] = ...) -> None: ...

class RetireEnvironmentResponse(_message.Message):
    __slots__ = ["environment"]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    environment: Environment
    def __init__(self, environment: _Optional[_Union[Environment, _Mapping]] = ...) -> None: ...

class RevokeEnvironmentRequest(_message.Message):
    __slots__ = ["environment", "operation_id", "preconditions", "reason"]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    PRECONDITIONS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    environment: EnvironmentRef
    operation_id: str
    preconditions: AdminPreconditions
    reason: str
    def __init__(self, operation_id: _Optional[str] = ..., environment: _Optional[_Union[EnvironmentRef, _Mapping]] = ..., preconditions: _Optional[_Union[AdminPreconditions, _Mapping]] = ..., reason: _Optional[str] = ...) -> None: ...

class RevokeEnvironmentResponse(_message.Message):
    __slots__ = ["environment"]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    environment: Environment
    def __init__(self, environment: _Optional[_Union[Environment, _Mapping]] = ...) -> None: ...

class RunClaim(_message.Message):
    __slots__ = ["binding_id", "claim_id", "epoch", "expires_at", "grant_generation", "run_id"]
    BINDING_ID_FIELD_NUMBER: _ClassVar[int]
    CLAIM_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    GRANT_GENERATION_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    binding_id: str
    claim_id: str
    epoch: int
    expires_at: _timestamp_pb2.Timestamp
    grant_generation: int
    run_id: str
    def __init__(self, binding_id: _Optional[str] = ..., run_id: _Optional[str] = ..., claim_id: _Optional[str] = ..., epoch: _Optional[int] = ..., grant_generation: _Optional[int] = ..., expires_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class RunCommandRequest(_message.Message):
    __slots__ = ["command", "command_id", "detach", "environment", "run_grant"]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    COMMAND_ID_FIELD_NUMBER: _ClassVar[int]
    DETACH_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    RUN_GRANT_FIELD_NUMBER: _ClassVar[int]
    command: CommandSpec
    command_id: str
    detach: bool
    environment: EnvironmentRef
    run_grant: Grant
    def __init__(self, run_grant: _Optional[_Union[Grant, _Mapping]] = ..., environment: _Optional[_Union[EnvironmentRef, _Mapping]] = ..., command: _Optional[_Union[CommandSpec, _Mapping]] = ..., command_id: _Optional[str] = ..., detach: bool = ...) -> None: ...

class SetEnvironmentDeadlineRequest(_message.Message):
    __slots__ = ["deadline", "operation_id", "target"]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    deadline: Deadline
    operation_id: str
    target: ReferenceTarget
    def __init__(self, operation_id: _Optional[str] = ..., target: _Optional[_Union[ReferenceTarget, _Mapping]] = ..., deadline: _Optional[_Union[Deadline, _Mapping]] = ...) -> None: ...

class SetEnvironmentDeadlineResponse(_message.Message):
    __slots__ = ["environment"]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    environment: Environment
    def __init__(self, environment: _Optional[_Union[Environment, _Mapping]] = ...) -> None: ...

class SetEnvironmentRetentionRequest(_message.Message):
    __slots__ = ["operation_id", "retain", "target"]
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    RETAIN_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    operation_id: str
    retain: bool
    target: ReferenceTarget
    def __init__(self, operation_id: _Optional[str] = ..., target: _Optional[_Union[ReferenceTarget, _Mapping]] = ..., retain: bool = ...) -> None: ...

class SetEnvironmentRetentionResponse(_message.Message):
    __slots__ = ["environment"]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    environment: Environment
    def __init__(self, environment: _Optional[_Union[Environment, _Mapping]] = ...) -> None: ...

class Snapshot(_message.Message):
    __slots__ = ["commands", "created_at", "cut_at", "failure_message", "failure_reason", "method", "name", "profile", "ready_at", "size_bytes", "source", "source_binding_id", "state"]
    COMMANDS_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    CUT_AT_FIELD_NUMBER: _ClassVar[int]
    FAILURE_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    FAILURE_REASON_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    READY_AT_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    SOURCE_BINDING_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    commands: _containers.RepeatedCompositeFieldContainer[SnapshotCommand]
    created_at: _timestamp_pb2.Timestamp
    cut_at: _timestamp_pb2.Timestamp
    failure_message: str
    failure_reason: str
    method: SnapshotMethod
    name: str
    profile: str
    ready_at: _timestamp_pb2.Timestamp
    size_bytes: int
    source: EnvironmentRef
    source_binding_id: str
    state: SnapshotState
    def __init__(self, name: _Optional[str] = ..., state: _Optional[_Union[SnapshotState, str]] = ..., method: _Optional[_Union[SnapshotMethod, str]] = ..., source: _Optional[_Union[EnvironmentRef, _Mapping]] = ..., source_binding_id: _Optional[str] = ..., profile: _Optional[str] = ..., created_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., cut_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., ready_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., size_bytes: _Optional[int] = ..., commands: _Optional[_Iterable[_Union[SnapshotCommand, _Mapping]]] = ..., failure_reason: _Optional[str] = ..., failure_message: _Optional[str] = ...) -> None: ...

class SnapshotCommand(_message.Message):
    __slots__ = ["command_id", "exit_code", "state"]
    COMMAND_ID_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    command_id: str
    exit_code: int
    state: CommandState
    def __init__(self, command_id: _Optional[str] = ..., state: _Optional[_Union[CommandState, str]] = ..., exit_code: _Optional[int] = ...) -> None: ...

class StartCommandRequest(_message.Message):
    __slots__ = ["command", "command_id", "detach", "environment", "run_grant"]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    COMMAND_ID_FIELD_NUMBER: _ClassVar[int]
    DETACH_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    RUN_GRANT_FIELD_NUMBER: _ClassVar[int]
    command: CommandSpec
    command_id: str
    detach: bool
    environment: EnvironmentRef
    run_grant: Grant
    def __init__(self, run_grant: _Optional[_Union[Grant, _Mapping]] = ..., environment: _Optional[_Union[EnvironmentRef, _Mapping]] = ..., command: _Optional[_Union[CommandSpec, _Mapping]] = ..., detach: bool = ..., command_id: _Optional[str] = ...) -> None: ...

class StartCommandResponse(_message.Message):
    __slots__ = ["command", "result"]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    command: CommandInfo
    result: CommandResult
    def __init__(self, result: _Optional[_Union[CommandResult, _Mapping]] = ..., command: _Optional[_Union[CommandInfo, _Mapping]] = ...) -> None: ...

class StatFile(_message.Message):
    __slots__ = ["path"]
    PATH_FIELD_NUMBER: _ClassVar[int]
    path: bytes
    def __init__(self, path: _Optional[bytes] = ...) -> None: ...

class StatFileResult(_message.Message):
    __slots__ = ["info"]
    INFO_FIELD_NUMBER: _ClassVar[int]
    info: FileInfo
    def __init__(self, info: _Optional[_Union[FileInfo, _Mapping]] = ...) -> None: ...

class SuspendEnvironmentRequest(_message.Message):
    __slots__ = ["operation_id", "target"]
    OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    operation_id: str
    target: ReferenceTarget
    def __init__(self, operation_id: _Optional[str] = ..., target: _Optional[_Union[ReferenceTarget, _Mapping]] = ...) -> None: ...

class SuspendEnvironmentResponse(_message.Message):
    __slots__ = ["environment"]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    environment: Environment
    def __init__(self, environment: _Optional[_Union[Environment, _Mapping]] = ...) -> None: ...

class TerminalRequest(_message.Message):
    __slots__ = ["input", "resize", "start"]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    RESIZE_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    input: bytes
    resize: TerminalSize
    start: TerminalStart
    def __init__(self, start: _Optional[_Union[TerminalStart, _Mapping]] = ..., input: _Optional[bytes] = ..., resize: _Optional[_Union[TerminalSize, _Mapping]] = ...) -> None: ...

class TerminalResponse(_message.Message):
    __slots__ = ["output", "result", "started"]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    output: bytes
    result: CommandResult
    started: _timestamp_pb2.Timestamp
    def __init__(self, started: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., output: _Optional[bytes] = ..., result: _Optional[_Union[CommandResult, _Mapping]] = ...) -> None: ...

class TerminalSize(_message.Message):
    __slots__ = ["columns", "rows"]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    columns: int
    rows: int
    def __init__(self, rows: _Optional[int] = ..., columns: _Optional[int] = ...) -> None: ...

class TerminalStart(_message.Message):
    __slots__ = ["command", "environment", "run_grant", "size"]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    RUN_GRANT_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    command: CommandSpec
    environment: EnvironmentRef
    run_grant: Grant
    size: TerminalSize
    def __init__(self, run_grant: _Optional[_Union[Grant, _Mapping]] = ..., environment: _Optional[_Union[EnvironmentRef, _Mapping]] = ..., command: _Optional[_Union[CommandSpec, _Mapping]] = ..., size: _Optional[_Union[TerminalSize, _Mapping]] = ...) -> None: ...

class UsageCounters(_message.Message):
    __slots__ = ["bytes_in", "bytes_out", "commands", "cpu_nanoseconds", "memory_kib_seconds", "memory_peak_bytes", "ready_milliseconds", "storage_kib_seconds", "suspended_milliseconds"]
    BYTES_IN_FIELD_NUMBER: _ClassVar[int]
    BYTES_OUT_FIELD_NUMBER: _ClassVar[int]
    COMMANDS_FIELD_NUMBER: _ClassVar[int]
    CPU_NANOSECONDS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_KIB_SECONDS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_PEAK_BYTES_FIELD_NUMBER: _ClassVar[int]
    READY_MILLISECONDS_FIELD_NUMBER: _ClassVar[int]
    STORAGE_KIB_SECONDS_FIELD_NUMBER: _ClassVar[int]
    SUSPENDED_MILLISECONDS_FIELD_NUMBER: _ClassVar[int]
    bytes_in: int
    bytes_out: int
    commands: int
    cpu_nanoseconds: int
    memory_kib_seconds: int
    memory_peak_bytes: int
    ready_milliseconds: int
    storage_kib_seconds: int
    suspended_milliseconds: int
    def __init__(self, cpu_nanoseconds: _Optional[int] = ..., memory_kib_seconds: _Optional[int] = ..., memory_peak_bytes: _Optional[int] = ..., storage_kib_seconds: _Optional[int] = ..., ready_milliseconds: _Optional[int] = ..., suspended_milliseconds: _Optional[int] = ..., commands: _Optional[int] = ..., bytes_in: _Optional[int] = ..., bytes_out: _Optional[int] = ...) -> None: ...

class UsageRecord(_message.Message):
    __slots__ = ["binding_id", "client_hash", "environment", "owner_hash", "profile", "snapshot", "window"]
    BINDING_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_HASH_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    OWNER_HASH_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    binding_id: str
    client_hash: str
    environment: EnvironmentRef
    owner_hash: str
    profile: str
    snapshot: str
    window: UsageWindow
    def __init__(self, environment: _Optional[_Union[EnvironmentRef, _Mapping]] = ..., binding_id: _Optional[str] = ..., owner_hash: _Optional[str] = ..., client_hash: _Optional[str] = ..., profile: _Optional[str] = ..., window: _Optional[_Union[UsageWindow, _Mapping]] = ..., snapshot: _Optional[str] = ...) -> None: ...

class UsageWindow(_message.Message):
    __slots__ = ["closed", "end", "start", "usage"]
    CLOSED_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    closed: bool
    end: _timestamp_pb2.Timestamp
    start: _timestamp_pb2.Timestamp
    usage: UsageCounters
    def __init__(self, start: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., end: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., usage: _Optional[_Union[UsageCounters, _Mapping]] = ..., closed: bool = ...) -> None: ...

class ValidateProfileRequest(_message.Message):
    __slots__ = ["expected_digest", "profile"]
    EXPECTED_DIGEST_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    expected_digest: str
    profile: str
    def __init__(self, profile: _Optional[str] = ..., expected_digest: _Optional[str] = ...) -> None: ...

class ValidateProfileResponse(_message.Message):
    __slots__ = ["profile"]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    profile: Profile
    def __init__(self, profile: _Optional[_Union[Profile, _Mapping]] = ...) -> None: ...

class WatchCommandRequest(_message.Message):
    __slots__ = ["command_id", "environment", "run_grant"]
    COMMAND_ID_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    FROM_FIELD_NUMBER: _ClassVar[int]
    RUN_GRANT_FIELD_NUMBER: _ClassVar[int]
    command_id: str
    environment: EnvironmentRef
    run_grant: Grant
    def __init__(self, run_grant: _Optional[_Union[Grant, _Mapping]] = ..., environment: _Optional[_Union[EnvironmentRef, _Mapping]] = ..., command_id: _Optional[str] = ..., **kwargs) -> None: ...

class WriteFile(_message.Message):
    __slots__ = ["content", "create_parents", "expected_version", "file_mode", "mode", "path"]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    CREATE_PARENTS_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    FILE_MODE_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    content: bytes
    create_parents: bool
    expected_version: str
    file_mode: int
    mode: WriteMode
    path: bytes
    def __init__(self, path: _Optional[bytes] = ..., content: _Optional[bytes] = ..., mode: _Optional[_Union[WriteMode, str]] = ..., expected_version: _Optional[str] = ..., file_mode: _Optional[int] = ..., create_parents: bool = ...) -> None: ...

class WriteFileResult(_message.Message):
    __slots__ = ["info"]
    INFO_FIELD_NUMBER: _ClassVar[int]
    info: FileInfo
    def __init__(self, info: _Optional[_Union[FileInfo, _Mapping]] = ...) -> None: ...

class WriteFileStreamRequest(_message.Message):
    __slots__ = ["content", "environment", "run_grant", "size", "write"]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    RUN_GRANT_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    WRITE_FIELD_NUMBER: _ClassVar[int]
    content: bytes
    environment: EnvironmentRef
    run_grant: Grant
    size: int
    write: WriteFile
    def __init__(self, run_grant: _Optional[_Union[Grant, _Mapping]] = ..., environment: _Optional[_Union[EnvironmentRef, _Mapping]] = ..., write: _Optional[_Union[WriteFile, _Mapping]] = ..., size: _Optional[int] = ..., content: _Optional[bytes] = ...) -> None: ...

class WriteFileStreamResponse(_message.Message):
    __slots__ = ["result"]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    result: WriteFileResult
    def __init__(self, result: _Optional[_Union[WriteFileResult, _Mapping]] = ...) -> None: ...

class ErrorReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class FenceState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class LifecycleState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class ReferenceState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class DeadlineAction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class FileType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class WriteMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class CommandState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class OutputStream(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class UsageGranularity(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class UsageGroupBy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class SnapshotState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class SnapshotMethod(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
