package security

import (
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"

	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

func TestStatus(t *testing.T) {
	tests := []struct {
		err       error
		code      codes.Code
		reason    string
		retryable bool
	}{
		{ErrUnavailable, codes.Unavailable, reasonUnavailable, true},
		{ErrGlobalLimit, codes.ResourceExhausted, reasonLimitExceeded, true},
		{ErrClientLimit, codes.ResourceExhausted, reasonLimitExceeded, true},
		{ErrNotInPolicy, codes.Unauthenticated, reasonUnauthenticated, false},
		{fmt.Errorf("%w: %w", ErrCertificateRejected, ErrNoIdentity), codes.Unauthenticated, reasonUnauthenticated, false},
		{errors.New("something else"), codes.Internal, reasonInternal, false},
	}
	for _, tt := range tests {
		wantStatus(t, Status(tt.err), tt.code, tt.reason, tt.retryable)
	}
	if Status(nil) != nil {
		t.Fatal("Status(nil) is an error")
	}
}

// TestStatusReasonsAreContractReasons keeps the ErrorInfo reasons equal to the public
// contract's ErrorReason names.
func TestStatusReasonsAreContractReasons(t *testing.T) {
	for reason, value := range map[string]executionv1.ErrorReason{
		reasonUnauthenticated: executionv1.ErrorReason_ERROR_REASON_UNAUTHENTICATED,
		reasonLimitExceeded:   executionv1.ErrorReason_ERROR_REASON_LIMIT_EXCEEDED,
		reasonUnavailable:     executionv1.ErrorReason_ERROR_REASON_UNAVAILABLE,
		reasonInternal:        executionv1.ErrorReason_ERROR_REASON_INTERNAL,
	} {
		if want := "ERROR_REASON_" + reason; value.String() != want {
			t.Errorf("reason %s: contract name %s", reason, value)
		}
	}
}

func TestReasonOf(t *testing.T) {
	tests := map[error]Reason{
		ErrUnavailable:         ReasonUnavailable,
		ErrNoClientCertificate: ReasonNoCertificate,
		fmt.Errorf("%w: %w", ErrCertificateRejected, ErrAmbiguousIdentity): ReasonBadIdentity,
		ErrCertificateRejected: ReasonCertificateRejected,
		ErrCertificateExpired:  ReasonExpired,
		ErrUntrusted:           ReasonUntrusted,
		ErrNotInPolicy:         ReasonNotInPolicy,
		ErrUnauthenticated:     ReasonUnauthenticated,
		ErrGlobalLimit:         ReasonGlobalLimit,
		ErrClientLimit:         ReasonClientLimit,
		errors.New("tls: client offered only unsupported versions"): ReasonHandshake,
	}
	for err, want := range tests {
		if got := ReasonOf(err); got != want {
			t.Errorf("ReasonOf(%v) = %s; want %s", err, got, want)
		}
	}
}
