// Package apierror is execplane's one error vocabulary and its one translation into gRPC
// statuses (docs/api.md, "Errors"). Every layer — the store, the grants, the security
// layer, the helper protocol, the gateway and the controller's control API — wraps a class
// of the vocabulary with %w; Status, at the gRPC edge, finds it and answers its code, a
// google.rpc.ErrorInfo (domain Domain, the reason named after execution.v1 ErrorReason,
// metadata "retryable") and the message. The Go SDK reads the same classes back (FromStatus).
//
// Invariants:
//   - One class per answer: the outermost class in an error's chain decides.
//   - An error outside the vocabulary is INTERNAL with a generic message and the request id;
//     its text goes to the log only.
//   - Reason strings are derived from the ErrorReason enum, never written by hand.
package apierror

import (
	"context"
	"errors"
	"strconv"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Domain is the ErrorInfo domain of execplane's answers.
const Domain = "execplane.dev"

// metaRetryable is the ErrorInfo metadata key of the retryable flag.
const metaRetryable = "retryable"

// Of returns the vocabulary class err wraps (the outermost one), or nil. A context's
// deadline or cancellation is ErrUnavailable's reason under its own code (see Status).
func Of(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return nil
}

// Status returns err as a gRPC status error. Errors outside the vocabulary become INTERNAL
// with a generic message carrying requestID: their detail belongs in the log, never in the
// answer. Messages of the vocabulary name fields and rules, never secrets, and pass through.
func Status(err error, requestID string) error {
	if err == nil {
		return nil
	}
	e := Of(err)
	if _, ok := status.FromError(err); ok && e == nil {
		return err // already a status (from a downstream call): keep it
	}
	code, msg := codes.Internal, "internal error (request "+requestID+")"
	reason, retryable := ErrInternal.reason, false
	switch {
	case e != nil && e != ErrInternal:
		code, reason, retryable, msg = e.code, e.reason, e.retryable, err.Error()
		if e.fixed {
			msg = e.text
		}
	case errors.Is(err, context.DeadlineExceeded):
		code, reason, retryable, msg = codes.DeadlineExceeded, ErrUnavailable.reason, true, "deadline exceeded"
	case errors.Is(err, context.Canceled):
		code, reason, retryable, msg = codes.Canceled, ErrUnavailable.reason, true, "canceled"
	}
	st := status.New(code, msg)
	md := map[string]string{metaRetryable: strconv.FormatBool(retryable)}
	var extra *metadataError
	if e != nil && errors.As(err, &extra) {
		for k, v := range extra.md {
			if k != metaRetryable {
				md[k] = v
			}
		}
	}
	withInfo, detailErr := st.WithDetails(&errdetails.ErrorInfo{Reason: ReasonName(reason), Domain: Domain, Metadata: md})
	if detailErr != nil {
		return st.Err()
	}
	return withInfo.Err()
}

// Reason returns the ErrorInfo reason of a status error ("" when there is none).
func Reason(err error) string { return Info(err).GetReason() }

// Retryable reports whether a status error says the same call may succeed later.
func Retryable(err error) bool { return Info(err).GetMetadata()[metaRetryable] == "true" }

// IsInternal reports whether a status error is an INTERNAL answer (its detail is in the
// log only).
func IsInternal(err error) bool { return Reason(err) == ReasonName(ErrInternal.reason) }

// Info returns the status error's execplane ErrorInfo, or nil.
func Info(err error) *errdetails.ErrorInfo {
	st, ok := status.FromError(err)
	if !ok {
		return nil
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == Domain {
			return info
		}
	}
	return nil
}

// Matches reports whether an answer with code and reason belongs to class e.
func (e *Error) Matches(code codes.Code, reason string) bool {
	return e.code == code && ReasonName(e.reason) == reason
}

// metadataError carries ErrorInfo metadata beside its error (WithMetadata).
type metadataError struct {
	err error
	md  map[string]string
}

func (m *metadataError) Error() string { return m.err.Error() }
func (m *metadataError) Unwrap() error { return m.err }

// WithMetadata returns err with ErrorInfo metadata for its answer (a quota's name, limit
// and use): keys and values a caller may read, never secrets. "retryable" is the class's.
func WithMetadata(err error, md map[string]string) error {
	return &metadataError{err: err, md: md}
}
