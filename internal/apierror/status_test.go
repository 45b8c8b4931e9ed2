package apierror

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/execplane/execplane/internal/security"
	"github.com/execplane/execplane/pkg/grant"
	"github.com/execplane/execplane/pkg/store"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestStatus(t *testing.T) {
	for _, c := range []struct {
		err    error
		code   codes.Code
		reason string
	}{
		{fmt.Errorf("wrapped: %w", store.ErrNotFound), codes.NotFound, "NOT_FOUND"},
		{store.ErrOperationIDReused, codes.Aborted, "OPERATION_ID_REUSED"},
		{store.ErrFenced, codes.FailedPrecondition, "FENCED"},
		{store.ErrProfileMismatch, codes.FailedPrecondition, "PRECONDITION_MISMATCH"},
		{store.ErrLimitExceeded, codes.ResourceExhausted, "LIMIT_EXCEEDED"},
		{ErrNotLeader, codes.Unavailable, "UNAVAILABLE"},
		{security.ErrNotInPolicy, codes.Unauthenticated, "UNAUTHENTICATED"},
		{errors.New("secret detail from etcd"), codes.Internal, "INTERNAL"},
		{fmt.Errorf("w: %w", grant.ErrBadSignature), codes.Unauthenticated, "GRANT_INVALID"},
		{&grant.MismatchError{Claim: grant.ClaimClient}, codes.Unauthenticated, "GRANT_INVALID"},
		{grant.ErrRevoked, codes.Aborted, "REVOKED"},
		{grant.ErrStaleEpoch, codes.Aborted, "STALE_EPOCH"},
		{grant.ErrNotObserved, codes.Unavailable, "UNAVAILABLE"},
		{ErrNoLeader, codes.Unavailable, "UNAVAILABLE"},
		{ErrOutcomeUnknown, codes.Unknown, "OUTCOME_UNKNOWN"},
		{fmt.Errorf("exec: %w", ErrExecutorUnreachable), codes.Unavailable, "UNAVAILABLE"},
		{ErrUnimplemented, codes.Unimplemented, "UNIMPLEMENTED"},
		{ErrPathEscape, codes.PermissionDenied, "PATH_ESCAPE"},
		{ErrVersionMismatch, codes.Aborted, "VERSION_MISMATCH"},
		{ErrWrongType, codes.FailedPrecondition, "WRONG_TYPE"},
		{fmt.Errorf("Get \"https://secret-apiserver/\": %w", context.DeadlineExceeded), codes.DeadlineExceeded, "UNAVAILABLE"},
	} {
		err := Status(c.err, "req-1")
		st := status.Convert(err)
		if st.Code() != c.code || Reason(err) != c.reason {
			t.Errorf("%v: got %s/%s, want %s/%s", c.err, st.Code(), Reason(err), c.code, c.reason)
		}
		if strings.Contains(st.Message(), "secret") || (c.code == codes.Internal && !strings.Contains(st.Message(), "req-1")) {
			t.Errorf("internal message %q leaks detail or lacks the request id", st.Message())
		}
	}
	if Status(nil, "") != nil {
		t.Fatal("nil must stay nil")
	}
}
