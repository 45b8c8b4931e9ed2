// Package apierror is the one translation of execplane's errors into gRPC statuses
// (docs/api.md, "Errors"): a code, a google.rpc.ErrorInfo with domain "execplane.dev", a
// reason from execution.v1 ErrorReason and metadata "retryable". The gateway and the
// controller's control API both answer through it, so a refusal reads the same whichever
// served it.
package apierror

import (
	"context"
	"errors"
	"strconv"

	"github.com/execplane/execplane/internal/security"
	"github.com/execplane/execplane/pkg/grant"
	"github.com/execplane/execplane/pkg/store"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Domain is the ErrorInfo domain.
const Domain = security.ErrorDomain

// Errors of the edge itself, beside the store's, the security layer's and the grants'.
var (
	// ErrNotLeader is answered by a controller replica that does not lead: UNAVAILABLE,
	// retryable, so the gateway tries again (the Service routes to the leader).
	ErrNotLeader = errors.New("this controller replica is not the leader")
	// ErrNoLeader is the gateway's answer when no controller leader answered within the
	// call's deadline: UNAVAILABLE, retryable.
	ErrNoLeader = errors.New("no controller leader answers")
	// ErrOutcomeUnknown: the executor connection broke after a request was sent; a command
	// may have run. UNKNOWN, never retried automatically.
	ErrOutcomeUnknown = errors.New("executor outcome unknown")
	// ErrExecutorUnreachable: the exec stream was never established (the API server refused
	// the upgrade: the Pod is gone, exec is forbidden): nothing ran. UNAVAILABLE, retryable.
	ErrExecutorUnreachable = errors.New("the executor could not be reached: nothing ran")
	// ErrUnimplemented: CommandStatus and CancelCommand (commands are foreground).
	ErrUnimplemented = errors.New("not implemented: commands are foreground; cancel by ending the call")
	// ErrPathEscape: a path resolves outside the workspace root.
	ErrPathEscape = errors.New("path escapes the workspace")
	// ErrVersionMismatch: a compare-and-swap write found another content version.
	ErrVersionMismatch = errors.New("content version mismatch")
	// ErrWrongType: the path is of the wrong type for the operation.
	ErrWrongType = errors.New("wrong file type")
)

type mapping struct {
	match     func(error) bool
	code      codes.Code
	reason    string
	retryable bool
	// message, when set, replaces the error's own text (which may carry URLs or object
	// paths from a client library).
	message string
}

// is matches err wrapping any of targets.
func is(targets ...error) func(error) bool {
	return func(err error) bool {
		for _, t := range targets {
			if errors.Is(err, t) {
				return true
			}
		}
		return false
	}
}

// mappings are checked in order; the first match wins.
var mappings = []mapping{
	{is(ErrNotLeader, ErrNoLeader), codes.Unavailable, "UNAVAILABLE", true, ""},
	{is(ErrOutcomeUnknown), codes.Unknown, "OUTCOME_UNKNOWN", false, "the executor connection broke after the request was sent: the outcome is unknown"},
	{is(ErrExecutorUnreachable), codes.Unavailable, "UNAVAILABLE", true, "the executor could not be reached: nothing ran"},
	{is(ErrUnimplemented), codes.Unimplemented, "UNIMPLEMENTED", false, ""},
	{is(ErrPathEscape), codes.PermissionDenied, "PATH_ESCAPE", false, ""},
	{is(ErrVersionMismatch), codes.Aborted, "VERSION_MISMATCH", false, ""},
	{is(ErrWrongType), codes.FailedPrecondition, "WRONG_TYPE", false, ""},
	// Grants: a revoked generation and a moved epoch are ABORTED like the store's; a grant
	// newer than this gateway's view is retryable; every other grant failure is one class.
	{is(grant.ErrRevoked), codes.Aborted, "REVOKED", false, ""},
	{is(grant.ErrStaleEpoch), codes.Aborted, "STALE_EPOCH", false, ""},
	{is(grant.ErrNotObserved), codes.Unavailable, "UNAVAILABLE", true, ""},
	{is(grant.ErrOversized, grant.ErrMalformed, grant.ErrBadAlgorithm, grant.ErrUnknownKey, grant.ErrBadSignature,
		grant.ErrWrongIssuer, grant.ErrWrongAudience, grant.ErrLifetimeExceeded, grant.ErrExpired, grant.ErrNotYetValid,
		grant.ErrWrongPurpose, grant.ErrMismatch), codes.Unauthenticated, "GRANT_INVALID", false, ""},
	{is(store.ErrInvalidArgument), codes.InvalidArgument, "INVALID_ARGUMENT", false, ""},
	{is(store.ErrPermissionDenied), codes.PermissionDenied, "PERMISSION_DENIED", false, ""},
	{is(store.ErrNotFound), codes.NotFound, "NOT_FOUND", false, ""},
	{is(store.ErrAlreadyExists), codes.AlreadyExists, "ALREADY_EXISTS", false, ""},
	{is(store.ErrConflict), codes.Aborted, "CONFLICT", true, ""},
	{is(store.ErrOperationIDReused), codes.Aborted, "OPERATION_ID_REUSED", false, ""},
	{is(store.ErrRunClaimHeld), codes.Aborted, "RUN_CLAIM_HELD", false, ""},
	{is(store.ErrStaleEpoch), codes.Aborted, "STALE_EPOCH", false, ""},
	{is(store.ErrRevoked), codes.Aborted, "REVOKED", false, ""},
	{is(store.ErrPreconditionMismatch), codes.Aborted, "PRECONDITION_MISMATCH", false, ""},
	{is(store.ErrFenced), codes.FailedPrecondition, "FENCED", false, ""},
	{is(store.ErrNotReady), codes.FailedPrecondition, "NOT_READY", false, ""},
	{is(store.ErrProfileMismatch), codes.FailedPrecondition, "PRECONDITION_MISMATCH", false, ""},
	{is(store.ErrLimitExceeded), codes.ResourceExhausted, "LIMIT_EXCEEDED", false, ""},
	{is(security.ErrUnavailable), codes.Unavailable, "UNAVAILABLE", true, ""},
	{is(security.ErrResourceExhausted), codes.ResourceExhausted, "LIMIT_EXCEEDED", true, ""},
	{is(security.ErrUnauthenticated), codes.Unauthenticated, "UNAUTHENTICATED", false, ""},
	{is(context.DeadlineExceeded), codes.DeadlineExceeded, "UNAVAILABLE", true, "deadline exceeded"},
	{is(context.Canceled), codes.Canceled, "UNAVAILABLE", true, "canceled"},
}

// Status returns err as a gRPC status error. Errors outside the vocabulary become INTERNAL
// with a generic message carrying requestID: their detail belongs in the log, never in the
// answer. Messages of known errors name fields and rules, never secrets, and pass through.
func Status(err error, requestID string) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok && !isOurs(err) {
		return err // already a status (from a downstream call): keep it
	}
	code, reason, retryable, msg := codes.Internal, "INTERNAL", false, "internal error (request "+requestID+")"
	for _, m := range mappings {
		if m.match(err) {
			code, reason, retryable, msg = m.code, m.reason, m.retryable, err.Error()
			if m.message != "" {
				msg = m.message
			}
			break
		}
	}
	st := status.New(code, msg)
	withInfo, detailErr := st.WithDetails(&errdetails.ErrorInfo{
		Reason: reason, Domain: Domain, Metadata: map[string]string{"retryable": strconv.FormatBool(retryable)},
	})
	if detailErr != nil {
		return st.Err()
	}
	return withInfo.Err()
}

func isOurs(err error) bool {
	for _, m := range mappings {
		if m.match(err) {
			return true
		}
	}
	return false
}

// Reason returns the ErrorInfo reason of a status error ("" when there is none).
func Reason(err error) string { return info(err).GetReason() }

// Retryable reports whether a status error says the same call may succeed later.
func Retryable(err error) bool { return info(err).GetMetadata()["retryable"] == "true" }

// info returns the status error's execplane ErrorInfo, or nil.
func info(err error) *errdetails.ErrorInfo {
	st, ok := status.FromError(err)
	if !ok {
		return nil
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Domain == Domain {
			return info
		}
	}
	return nil
}
