package security

import (
	"errors"
	"strconv"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrorDomain is the google.rpc.ErrorInfo domain of execplane's errors (docs/api.md).
const ErrorDomain = "execplane.dev"

// ErrorInfo reasons of this package's refusals: execution.v1 ErrorReason names without their
// ERROR_REASON_ prefix.
const (
	reasonUnauthenticated = "UNAUTHENTICATED"
	reasonLimitExceeded   = "LIMIT_EXCEEDED"
	reasonUnavailable     = "UNAVAILABLE"
	reasonInternal        = "INTERNAL"
)

// Status translates this package's errors into gRPC status errors with a google.rpc.ErrorInfo
// (domain ErrorDomain, a reason, metadata "retryable") as docs/api.md specifies:
// ErrUnavailable → UNAVAILABLE (retryable), ErrResourceExhausted → RESOURCE_EXHAUSTED
// (retryable), ErrUnauthenticated → UNAUTHENTICATED; anything else → INTERNAL with a generic
// message. The messages of this package's errors name a rule, never a certificate, key or
// identity, so they are returned to the caller as they are.
func Status(err error) error {
	if err == nil {
		return nil
	}
	code, reason, retryable, msg := codes.Internal, reasonInternal, false, "internal error"
	switch {
	case errors.Is(err, ErrUnavailable):
		code, reason, retryable, msg = codes.Unavailable, reasonUnavailable, true, err.Error()
	case errors.Is(err, ErrResourceExhausted):
		code, reason, retryable, msg = codes.ResourceExhausted, reasonLimitExceeded, true, err.Error()
	case errors.Is(err, ErrUnauthenticated):
		code, reason, msg = codes.Unauthenticated, reasonUnauthenticated, err.Error()
	}
	st := status.New(code, msg)
	withInfo, detailErr := st.WithDetails(&errdetails.ErrorInfo{
		Reason:   reason,
		Domain:   ErrorDomain,
		Metadata: map[string]string{"retryable": strconv.FormatBool(retryable)},
	})
	if detailErr != nil {
		return st.Err()
	}
	return withInfo.Err()
}
