package control

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"syscall"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/execplane/execplane/pkg/apierror"
)

// Found by the fault suite (test/chaos): an API server restarted under a status write
// answered the caller INTERNAL, which nothing retries, although the gateway retries an
// UNAVAILABLE call under its operation id and the replay gives the first outcome.
func TestAPIServerCutsAreRetryable(t *testing.T) {
	reset := &url.Error{Op: "Put", URL: "https://127.0.0.1:6443/apis/x", Err: &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}}
	refused := &url.Error{Op: "Get", URL: "https://127.0.0.1:6443/apis/x", Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}}
	cases := []struct {
		name      string
		err       error
		retryable bool
	}{
		{"connection reset", reset, true},
		{"connection refused", refused, true},
		{"EOF", fmt.Errorf("put: %w", io.ErrUnexpectedEOF), true},
		{"server timeout", apierrors.NewServerTimeout(schemaGroupResource, "update", 1), true},
		{"throttled", apierrors.NewTooManyRequests("slow down", 1), true},
		{"service unavailable", apierrors.NewServiceUnavailable("etcd"), true},
		{"an error of the vocabulary", apierror.ErrNotFound, false},
		{"the caller's deadline", context.DeadlineExceeded, false},
		{"a refusal of the object", apierrors.NewInvalid(schemaGroupKind, "x", nil), false},
		{"anything else", errors.New("boom"), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := transient(tc.err)
			if unavailable := errors.Is(got, apierror.ErrUnavailable); unavailable != tc.retryable {
				t.Fatalf("transient(%v) = %v, want retryable %v", tc.err, got, tc.retryable)
			}
			if tc.retryable && apierror.Retryable(apierror.Status(got, "r")) != true {
				t.Fatal("not marked retryable on the wire")
			}
		})
	}
}

var (
	schemaGroupResource = schema.GroupResource{Group: "execution.mecatl.dev", Resource: "executionenvironments"}
	schemaGroupKind     = schema.GroupKind{Group: "execution.mecatl.dev", Kind: "ExecutionEnvironment"}
)
