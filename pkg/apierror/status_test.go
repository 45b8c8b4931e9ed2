package apierror_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/execplane/execplane/pkg/apierror"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// answer is what a caller reads of a status error.
type answer struct {
	Code      codes.Code
	Reason    string
	Retryable bool
	Message   string
}

func read(err error) answer {
	st := status.Convert(err)
	return answer{st.Code(), apierror.Reason(err), apierror.Retryable(err), st.Message()}
}

func TestStatus(t *testing.T) {
	for _, c := range []struct {
		err  error
		want answer
	}{
		{fmt.Errorf("%w: profile", apierror.ErrNotFound), answer{codes.NotFound, "NOT_FOUND", false, "not found: profile"}},
		{apierror.ErrProfileMismatch, answer{codes.FailedPrecondition, "PRECONDITION_MISMATCH", false, "profile digest mismatch"}},
		{apierror.ErrPreconditionMismatch, answer{codes.Aborted, "PRECONDITION_MISMATCH", false, "precondition mismatch"}},
		{apierror.ErrConflict, answer{codes.Aborted, "CONFLICT", true, "conflict"}},
		{fmt.Errorf("%w: 16 calls", apierror.ErrBusy), answer{codes.ResourceExhausted, "LIMIT_EXCEEDED", true, "concurrency limit reached: 16 calls"}},
		{apierror.ErrLimitExceeded, answer{codes.ResourceExhausted, "LIMIT_EXCEEDED", false, "limit exceeded"}},
		// The outermost class decides.
		{fmt.Errorf("%w: the claim ended: %w", apierror.ErrOutcomeUnknown, apierror.ErrStaleEpoch), answer{codes.Unknown, "OUTCOME_UNKNOWN", false, apierror.ErrOutcomeUnknown.Error()}},
		// A fixed message hides what wraps it (a client library's URLs).
		{fmt.Errorf("%w: dial https://secret-apiserver/: refused", apierror.ErrExecutorUnreachable), answer{codes.Unavailable, "UNAVAILABLE", true, apierror.ErrExecutorUnreachable.Error()}},
		{errors.New("secret detail from etcd"), answer{codes.Internal, "INTERNAL", false, "internal error (request req-1)"}},
		{fmt.Errorf("%w: secret", apierror.ErrInternal), answer{codes.Internal, "INTERNAL", false, "internal error (request req-1)"}},
		{fmt.Errorf("Get \"https://secret-apiserver/\": %w", context.DeadlineExceeded), answer{codes.DeadlineExceeded, "UNAVAILABLE", true, "deadline exceeded"}},
		{context.Canceled, answer{codes.Canceled, "UNAVAILABLE", true, "canceled"}},
	} {
		if diff := cmp.Diff(c.want, read(apierror.Status(c.err, "req-1"))); diff != "" {
			t.Errorf("%v (-want +got):\n%s", c.err, diff)
		}
	}
	if apierror.Status(nil, "") != nil {
		t.Fatal("nil must stay nil")
	}
	// A downstream status passes through untouched.
	down := status.Error(codes.PermissionDenied, "from below")
	if got := apierror.Status(down, "r"); got != down {
		t.Fatalf("downstream status replaced: %v", got)
	}
}

// TestEveryReasonHasAClass: each ErrorReason a server can answer is produced by one class
// of the vocabulary, and its reason string is the enum's name.
func TestEveryReasonHasAClass(t *testing.T) {
	seen := map[executionv1.ErrorReason]bool{}
	for _, e := range apierror.Vocabulary() {
		seen[e.Reason()] = true
		if got, want := apierror.Reason(apierror.Status(e, "r")), strings.TrimPrefix(e.Reason().String(), "ERROR_REASON_"); got != want {
			t.Errorf("%v answers reason %q, want %q", e, got, want)
		}
		if apierror.ParseReason(apierror.ReasonName(e.Reason())) != e.Reason() {
			t.Errorf("%v: reason does not parse back", e)
		}
	}
	for v := range executionv1.ErrorReason_name {
		r := executionv1.ErrorReason(v)
		if r != executionv1.ErrorReason_ERROR_REASON_UNSPECIFIED && !seen[r] {
			t.Errorf("%v has no class in the vocabulary", r)
		}
	}
	if apierror.ReasonName(executionv1.ErrorReason_ERROR_REASON_UNSPECIFIED) != "" || apierror.ParseReason("ERROR_REASON_NOT_FOUND") != 0 || apierror.ParseReason("NOPE") != 0 {
		t.Error("UNSPECIFIED, prefixed and unknown reasons must not name a class")
	}
}

// packagePrefix is how a Go package names itself in an error ("store: not found").
var packagePrefix = regexp.MustCompile(`^[a-z0-9]+: `)

// TestMessagesNameNoPackage: what a caller reads never names a Go package.
func TestMessagesNameNoPackage(t *testing.T) {
	for _, e := range apierror.Vocabulary() {
		if packagePrefix.MatchString(e.Error()) {
			t.Errorf("class message %q carries a prefix", e.Error())
		}
	}
}
