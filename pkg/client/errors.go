package client

import (
	"context"
	"errors"
	"fmt"

	executionv1 "github.com/execplane/execplane/proto/execution/v1"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/execplane/execplane/pkg/apierror"
)

// Error is an answer of the execplane API that is not success.
type Error struct {
	// Code is the gRPC status code.
	Code codes.Code
	// Reason is the machine-readable reason (ErrorReason without its prefix: "NOT_FOUND",
	// "STALE_EPOCH", ...); empty when the answer carried none (a transport failure).
	Reason string
	// Message is the server's message.
	Message string
	// Retryable is the server's statement that the same call may succeed later and that
	// nothing was done.
	Retryable bool
	// RequestID is the gateway's request id (for the operator's logs), when known.
	RequestID string
	// Metadata is what the answer says beside its reason: for QUOTA_EXCEEDED the quota
	// ("quota"), its scope ("client" or "owner"), "limit" and "used".
	Metadata map[string]string
}

func (e *Error) Error() string {
	s := fmt.Sprintf("execplane: %s", e.Code)
	if e.Reason != "" {
		s += "/" + e.Reason
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.RequestID != "" {
		s += " (request " + e.RequestID + ")"
	}
	return s
}

// GRPCStatus lets status.FromError see the original status.
func (e *Error) GRPCStatus() *status.Status { return status.New(e.Code, e.Message) }

// Is matches the package's sentinel errors by code and, for the finer ones, reason; and the
// classes of pkg/apierror (the server's vocabulary) by their code and reason.
// A DEADLINE_EXCEEDED or CANCELLED answer also matches context.DeadlineExceeded or
// context.Canceled.
func (e *Error) Is(target error) bool {
	switch target {
	case context.DeadlineExceeded:
		return e.Code == codes.DeadlineExceeded
	case context.Canceled:
		return e.Code == codes.Canceled
	}
	if class, ok := target.(*apierror.Error); ok {
		return class.Matches(e.Code, e.Reason)
	}
	k, ok := target.(*kind)
	return ok && k.match(e)
}

// kind is a class of answers, for errors.Is.
type kind struct {
	name   string
	codes  []codes.Code
	reason executionv1.ErrorReason // UNSPECIFIED matches any reason of the codes
}

func (k *kind) Error() string { return "execplane: " + k.name }

func (k *kind) match(e *Error) bool {
	for _, c := range k.codes {
		if c == e.Code && (k.reason == executionv1.ErrorReason_ERROR_REASON_UNSPECIFIED || apierror.ReasonName(k.reason) == e.Reason) {
			return true
		}
	}
	return false
}

// Classes of errors, for errors.Is. The coarse ones follow the gRPC code; the fine ones
// (ErrStaleEpoch, ErrFenced, ...) the reason as well.
var (
	ErrInvalidArgument  error = &kind{name: "invalid argument", codes: []codes.Code{codes.InvalidArgument}}
	ErrUnauthenticated  error = &kind{name: "unauthenticated", codes: []codes.Code{codes.Unauthenticated}}
	ErrGrantInvalid     error = &kind{name: "grant invalid", codes: []codes.Code{codes.Unauthenticated}, reason: executionv1.ErrorReason_ERROR_REASON_GRANT_INVALID}
	ErrPermissionDenied error = &kind{name: "permission denied", codes: []codes.Code{codes.PermissionDenied}}
	ErrPathEscape       error = &kind{name: "path escapes the workspace", codes: []codes.Code{codes.PermissionDenied}, reason: executionv1.ErrorReason_ERROR_REASON_PATH_ESCAPE}
	// ErrNotFound: absent, or not yours (the two are indistinguishable by design).
	ErrNotFound      error = &kind{name: "not found", codes: []codes.Code{codes.NotFound}}
	ErrAlreadyExists error = &kind{name: "already exists", codes: []codes.Code{codes.AlreadyExists}}
	// ErrConflict: any ABORTED answer — a compare-and-swap lost, a stale epoch, a revoked
	// grant, a version mismatch, a precondition mismatch, a run claim held by another.
	ErrConflict           error = &kind{name: "conflict", codes: []codes.Code{codes.Aborted}}
	ErrStaleEpoch         error = &kind{name: "stale epoch", codes: []codes.Code{codes.Aborted}, reason: executionv1.ErrorReason_ERROR_REASON_STALE_EPOCH}
	ErrRevoked            error = &kind{name: "revoked", codes: []codes.Code{codes.Aborted}, reason: executionv1.ErrorReason_ERROR_REASON_REVOKED}
	ErrVersionMismatch    error = &kind{name: "version mismatch", codes: []codes.Code{codes.Aborted}, reason: executionv1.ErrorReason_ERROR_REASON_VERSION_MISMATCH}
	ErrRunClaimHeld       error = &kind{name: "run claim held", codes: []codes.Code{codes.Aborted}, reason: executionv1.ErrorReason_ERROR_REASON_RUN_CLAIM_HELD}
	ErrOperationIDReused  error = &kind{name: "operation id reused", codes: []codes.Code{codes.Aborted}, reason: executionv1.ErrorReason_ERROR_REASON_OPERATION_ID_REUSED}
	ErrPreconditionFailed error = &kind{name: "precondition mismatch", codes: []codes.Code{codes.Aborted, codes.FailedPrecondition}, reason: executionv1.ErrorReason_ERROR_REASON_PRECONDITION_MISMATCH}
	// ErrFenced: the environment's last outcome is unproven; an administrator must recover it.
	ErrFenced    error = &kind{name: "fenced", codes: []codes.Code{codes.FailedPrecondition}, reason: executionv1.ErrorReason_ERROR_REASON_FENCED}
	ErrNotReady  error = &kind{name: "not ready", codes: []codes.Code{codes.FailedPrecondition}, reason: executionv1.ErrorReason_ERROR_REASON_NOT_READY}
	ErrWrongType error = &kind{name: "wrong file type", codes: []codes.Code{codes.FailedPrecondition}, reason: executionv1.ErrorReason_ERROR_REASON_WRONG_TYPE}
	// ErrExhausted: a rate, concurrency, size or capacity limit.
	ErrExhausted error = &kind{name: "limit exceeded", codes: []codes.Code{codes.ResourceExhausted}}
	// ErrQuotaExceeded: an operator's quota of the client or the owner (Error.Metadata
	// names it); also an ErrExhausted.
	ErrQuotaExceeded error = &kind{name: "quota exceeded", codes: []codes.Code{codes.ResourceExhausted}, reason: executionv1.ErrorReason_ERROR_REASON_QUOTA_EXCEEDED}
	// ErrUnavailable: the gateway, its security material or the controller leader is
	// unavailable for now.
	ErrUnavailable error = &kind{name: "unavailable", codes: []codes.Code{codes.Unavailable}}
	// ErrOutcomeUnknown: the executor connection broke after the request was sent; a command
	// may have run. Never retried.
	// Also a write or command whose call ended on the caller's side (deadline, cancel).
	ErrOutcomeUnknown error = &kind{name: "outcome unknown", codes: []codes.Code{codes.Unknown, codes.DeadlineExceeded, codes.Canceled}, reason: executionv1.ErrorReason_ERROR_REASON_OUTCOME_UNKNOWN}
	// ErrRecordUnverified: a durable command's record is not the one its supervisor wrote
	// (the workload altered or planted it); nothing was done on its account.
	ErrRecordUnverified error = &kind{name: "record unverified", codes: []codes.Code{codes.DataLoss}, reason: executionv1.ErrorReason_ERROR_REASON_RECORD_UNVERIFIED}
	ErrUnimplemented    error = &kind{name: "unimplemented", codes: []codes.Code{codes.Unimplemented}}
	ErrInternal         error = &kind{name: "internal", codes: []codes.Code{codes.Internal}}
)

// asError converts a gRPC status error into an *Error; other errors (nil, a context error
// from before the call) are returned as they are.
func asError(err error, requestID string) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	out := &Error{Code: st.Code(), Message: st.Message(), RequestID: requestID, Reason: apierror.Reason(err), Retryable: apierror.Retryable(err)}
	for k, v := range apierror.Info(err).GetMetadata() {
		if k != "retryable" {
			if out.Metadata == nil {
				out.Metadata = map[string]string{}
			}
			out.Metadata[k] = v
		}
	}
	return out
}
