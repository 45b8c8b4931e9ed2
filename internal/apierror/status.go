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
	"github.com/execplane/execplane/pkg/store"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Domain is the ErrorInfo domain.
const Domain = security.ErrorDomain

// ErrNotLeader is answered by a controller replica that does not lead: UNAVAILABLE,
// retryable, so the gateway tries again (the Service routes to the leader).
var ErrNotLeader = errors.New("this controller replica is not the leader")

type mapping struct {
	err       error
	code      codes.Code
	reason    string
	retryable bool
	// message, when set, replaces the error's own text (which may carry URLs or object
	// paths from a client library).
	message string
}

// mappings are checked in order; the first match wins.
var mappings = []mapping{
	{ErrNotLeader, codes.Unavailable, "UNAVAILABLE", true, ""},
	{store.ErrInvalidArgument, codes.InvalidArgument, "INVALID_ARGUMENT", false, ""},
	{store.ErrPermissionDenied, codes.PermissionDenied, "PERMISSION_DENIED", false, ""},
	{store.ErrNotFound, codes.NotFound, "NOT_FOUND", false, ""},
	{store.ErrAlreadyExists, codes.AlreadyExists, "ALREADY_EXISTS", false, ""},
	{store.ErrConflict, codes.Aborted, "CONFLICT", true, ""},
	{store.ErrOperationIDReused, codes.Aborted, "OPERATION_ID_REUSED", false, ""},
	{store.ErrRunClaimHeld, codes.Aborted, "RUN_CLAIM_HELD", false, ""},
	{store.ErrStaleEpoch, codes.Aborted, "STALE_EPOCH", false, ""},
	{store.ErrRevoked, codes.Aborted, "REVOKED", false, ""},
	{store.ErrPreconditionMismatch, codes.Aborted, "PRECONDITION_MISMATCH", false, ""},
	{store.ErrFenced, codes.FailedPrecondition, "FENCED", false, ""},
	{store.ErrNotReady, codes.FailedPrecondition, "NOT_READY", false, ""},
	{store.ErrProfileMismatch, codes.FailedPrecondition, "PRECONDITION_MISMATCH", false, ""},
	{store.ErrLimitExceeded, codes.ResourceExhausted, "LIMIT_EXCEEDED", false, ""},
	{security.ErrUnavailable, codes.Unavailable, "UNAVAILABLE", true, ""},
	{security.ErrResourceExhausted, codes.ResourceExhausted, "LIMIT_EXCEEDED", true, ""},
	{security.ErrUnauthenticated, codes.Unauthenticated, "UNAUTHENTICATED", false, ""},
	{context.DeadlineExceeded, codes.DeadlineExceeded, "UNAVAILABLE", true, "deadline exceeded"},
	{context.Canceled, codes.Canceled, "UNAVAILABLE", true, "canceled"},
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
		if errors.Is(err, m.err) {
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
		if errors.Is(err, m.err) {
			return true
		}
	}
	return false
}

// Reason returns the ErrorInfo reason of a status error ("" when there is none).
func Reason(err error) string {
	st, ok := status.FromError(err)
	if !ok {
		return ""
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Domain == Domain {
			return info.Reason
		}
	}
	return ""
}
