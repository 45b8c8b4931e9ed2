package control

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/execplane/execplane/pkg/apierror"
	controlv1 "github.com/execplane/execplane/proto/control/v1"
)

// A handler that panics answers INTERNAL with the request id and a generic message; the
// panic's value and stack are in the log, not in the answer, and the process goes on.
func TestAPanickingHandlerAnswersInternal(t *testing.T) {
	var logs bytes.Buffer
	intercept := Recovering(hclog.New(&hclog.LoggerOptions{Output: &logs}))
	req := &controlv1.AcquireRunRequest{Caller: &controlv1.Caller{RequestId: "req-7"}}
	info := &grpc.UnaryServerInfo{FullMethod: "/execplane.control.v1.ControlService/AcquireRun"}
	resp, err := intercept(context.Background(), req, info, func(context.Context, any) (any, error) {
		panic("secret-detail")
	})
	if resp != nil {
		t.Fatalf("resp = %v, want nil", resp)
	}
	st, _ := status.FromError(err)
	if st.Code() != codes.Internal || !apierror.IsInternal(err) {
		t.Fatalf("answer = %v, want INTERNAL with the internal reason", err)
	}
	if !strings.Contains(st.Message(), "req-7") || strings.Contains(st.Message(), "secret-detail") {
		t.Fatalf("message %q: want the request id and no detail", st.Message())
	}
	for _, want := range []string{"control call panicked", "secret-detail", "recover_test.go", "req-7"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}

	// A handler that does not panic is answered as it is.
	resp, err = intercept(context.Background(), req, info, func(context.Context, any) (any, error) { return "ok", nil })
	if resp != "ok" || err != nil {
		t.Fatalf("passing handler: %v, %v", resp, err)
	}
}
