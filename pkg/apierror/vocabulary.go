package apierror

import (
	"slices"
	"strings"

	"google.golang.org/grpc/codes"

	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// Error is one class of refusal of the vocabulary: the gRPC code, the ErrorReason and
// whether the same call may succeed later. Its values are the sentinels below; a layer
// wraps one with %w to say why (fmt.Errorf("%w: profile", apierror.ErrNotFound)), and
// errors.Is finds it at the edge.
type Error struct {
	text      string
	code      codes.Code
	reason    executionv1.ErrorReason
	retryable bool
	// fixed: the caller reads text alone, never what wraps it (the detail is a client
	// library's, with URLs or object paths, and goes to the log only).
	fixed bool
}

func (e *Error) Error() string { return e.text }

// Code is the gRPC status code of the class.
func (e *Error) Code() codes.Code { return e.code }

// Reason is the class's ErrorReason.
func (e *Error) Reason() executionv1.ErrorReason { return e.reason }

// Retryable reports whether the same call may succeed later, nothing having been done.
func (e *Error) Retryable() bool { return e.retryable }

// vocabulary holds every class, in declaration order; class registers each.
var vocabulary []*Error

func class(code codes.Code, reason executionv1.ErrorReason, text string) *Error {
	e := &Error{text: text, code: code, reason: reason}
	vocabulary = append(vocabulary, e)
	return e
}

func (e *Error) retry() *Error { e.retryable = true; return e }
func (e *Error) fix() *Error   { e.fixed = true; return e }

// The vocabulary (docs/api.md, "Errors"). Each names what a caller should do; a message
// built on one names fields and rules, never owners, identities, tokens or packages.
var (
	// ErrInvalidArgument: a malformed input, refused before any lookup.
	ErrInvalidArgument = class(codes.InvalidArgument, executionv1.ErrorReason_ERROR_REASON_INVALID_ARGUMENT, "invalid argument")
	// ErrUnauthenticated: no acceptable client certificate, or an identity not in policy.
	ErrUnauthenticated = class(codes.Unauthenticated, executionv1.ErrorReason_ERROR_REASON_UNAUTHENTICATED, "unauthenticated")
	// ErrGrantInvalid: a grant that is malformed, badly signed, expired, of the wrong
	// purpose or bound to something else.
	ErrGrantInvalid = class(codes.Unauthenticated, executionv1.ErrorReason_ERROR_REASON_GRANT_INVALID, "invalid grant")
	// ErrPermissionDenied: the caller lacks a capability.
	ErrPermissionDenied = class(codes.PermissionDenied, executionv1.ErrorReason_ERROR_REASON_PERMISSION_DENIED, "permission denied")
	// ErrPathEscape: a path resolves outside the workspace root.
	ErrPathEscape = class(codes.PermissionDenied, executionv1.ErrorReason_ERROR_REASON_PATH_ESCAPE, "path escapes the workspace")
	// ErrNotFound: absent, or not visible to the caller (the two are indistinguishable).
	ErrNotFound = class(codes.NotFound, executionv1.ErrorReason_ERROR_REASON_NOT_FOUND, "not found")
	// ErrAlreadyExists: the binding already holds another environment or reference, or the
	// path exists.
	ErrAlreadyExists = class(codes.AlreadyExists, executionv1.ErrorReason_ERROR_REASON_ALREADY_EXISTS, "already exists")
	// ErrConflict: a compare-and-swap kept losing; retry.
	ErrConflict = class(codes.Aborted, executionv1.ErrorReason_ERROR_REASON_CONFLICT, "conflict").retry()
	// ErrStaleEpoch: the grant's epoch or run claim is not the current one.
	ErrStaleEpoch = class(codes.Aborted, executionv1.ErrorReason_ERROR_REASON_STALE_EPOCH, "stale epoch")
	// ErrRevoked: the grant's generation was revoked.
	ErrRevoked = class(codes.Aborted, executionv1.ErrorReason_ERROR_REASON_REVOKED, "grant generation revoked")
	// ErrVersionMismatch: a compare-and-swap write found another content version.
	ErrVersionMismatch = class(codes.Aborted, executionv1.ErrorReason_ERROR_REASON_VERSION_MISMATCH, "content version mismatch")
	// ErrOperationIDReused: the operation id was used before with other arguments.
	ErrOperationIDReused = class(codes.Aborted, executionv1.ErrorReason_ERROR_REASON_OPERATION_ID_REUSED, "operation id reused with other arguments")
	// ErrRunClaimHeld: another unexpired run claim holds the environment.
	ErrRunClaimHeld = class(codes.Aborted, executionv1.ErrorReason_ERROR_REASON_RUN_CLAIM_HELD, "run claim held")
	// ErrPreconditionMismatch: an administrative precondition differs.
	ErrPreconditionMismatch = class(codes.Aborted, executionv1.ErrorReason_ERROR_REASON_PRECONDITION_MISMATCH, "precondition mismatch")
	// ErrProfileMismatch: the profile's digest is not the one the caller pinned. Unlike an
	// administrative precondition, retrying cannot help until the operator acts.
	ErrProfileMismatch = class(codes.FailedPrecondition, executionv1.ErrorReason_ERROR_REASON_PRECONDITION_MISMATCH, "profile digest mismatch")
	// ErrFenced: the environment is fenced until an administrator recovers it.
	ErrFenced = class(codes.FailedPrecondition, executionv1.ErrorReason_ERROR_REASON_FENCED, "environment fenced")
	// ErrNotReady: not ready for this operation.
	ErrNotReady = class(codes.FailedPrecondition, executionv1.ErrorReason_ERROR_REASON_NOT_READY, "not ready")
	// ErrWrongType: the path is of the wrong type for the operation.
	ErrWrongType = class(codes.FailedPrecondition, executionv1.ErrorReason_ERROR_REASON_WRONG_TYPE, "wrong file type")
	// ErrLimitExceeded: a size, count or capacity bound; the same call fails again.
	ErrLimitExceeded = class(codes.ResourceExhausted, executionv1.ErrorReason_ERROR_REASON_LIMIT_EXCEEDED, "limit exceeded")
	// ErrQuotaExceeded: an operator's quota of the client or the owner; the same call fails
	// again until the tenant's use falls (an environment deleted, a window passed).
	ErrQuotaExceeded = class(codes.ResourceExhausted, executionv1.ErrorReason_ERROR_REASON_QUOTA_EXCEEDED, "quota exceeded")
	// ErrBusy: a concurrency bound, refused at once rather than queued; the same call may
	// succeed once calls in flight end.
	ErrBusy = class(codes.ResourceExhausted, executionv1.ErrorReason_ERROR_REASON_LIMIT_EXCEEDED, "concurrency limit reached").retry()
	// ErrUnavailable: security material, the view of environments or the controller leader
	// is not available for now; retry.
	ErrUnavailable = class(codes.Unavailable, executionv1.ErrorReason_ERROR_REASON_UNAVAILABLE, "unavailable").retry()
	// ErrExecutorUnreachable: the exec stream to the executor was never established (the API
	// server refused the upgrade: the Pod is gone, exec is forbidden): nothing ran; retry.
	ErrExecutorUnreachable = class(codes.Unavailable, executionv1.ErrorReason_ERROR_REASON_UNAVAILABLE, "the executor could not be reached: nothing ran").retry().fix()
	// ErrOutcomeUnknown: the executor connection broke after the request was sent; a command
	// may have run. Never retried automatically.
	ErrOutcomeUnknown = class(codes.Unknown, executionv1.ErrorReason_ERROR_REASON_OUTCOME_UNKNOWN, "the executor connection broke after the request was sent: the outcome is unknown").fix()
	// ErrRecordUnverified: a durable command's record is not the one its supervisor wrote
	// (altered or planted by the workload): nothing was done on its account.
	ErrRecordUnverified = class(codes.DataLoss, executionv1.ErrorReason_ERROR_REASON_RECORD_UNVERIFIED, "the command's record is not its supervisor's")
	// ErrUnimplemented: the operation is not implemented.
	ErrUnimplemented = class(codes.Unimplemented, executionv1.ErrorReason_ERROR_REASON_UNIMPLEMENTED, "not implemented")
	// ErrInternal: an unexpected failure. Anything outside the vocabulary is answered as it.
	ErrInternal = class(codes.Internal, executionv1.ErrorReason_ERROR_REASON_INTERNAL, "internal error")
)

// Vocabulary lists every class, for tests and documentation.
func Vocabulary() []*Error { return slices.Clone(vocabulary) }

// reasonPrefix is what ErrorInfo.reason leaves out of an ErrorReason's name.
const reasonPrefix = "ERROR_REASON_"

// ReasonName is the ErrorInfo.reason of r: its enum name without the ERROR_REASON_ prefix
// ("NOT_FOUND"); "" for ERROR_REASON_UNSPECIFIED and values outside the enum.
func ReasonName(r executionv1.ErrorReason) string {
	name, ok := executionv1.ErrorReason_name[int32(r)]
	if !ok || r == executionv1.ErrorReason_ERROR_REASON_UNSPECIFIED {
		return ""
	}
	return strings.TrimPrefix(name, reasonPrefix)
}

// ParseReason is the ErrorReason an ErrorInfo.reason names (UNSPECIFIED when none).
func ParseReason(s string) executionv1.ErrorReason {
	if s == "" || strings.HasPrefix(s, reasonPrefix) {
		return executionv1.ErrorReason_ERROR_REASON_UNSPECIFIED
	}
	return executionv1.ErrorReason(executionv1.ErrorReason_value[reasonPrefix+s])
}
