package apierror_test

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/execplane/execplane/pkg/apierror"
)

// A panic becomes an error that keeps its value and stack for the log and answers INTERNAL
// with nothing of either; a call that returns is passed through as it is.
func TestRecoveredTurnsAPanicIntoInternal(t *testing.T) {
	resp, err := apierror.Recovered(func() (string, error) { panic("secret-detail") })
	if resp != "" || !errors.Is(err, apierror.ErrPanic) {
		t.Fatalf("got %q, %v; want the zero value and ErrPanic", resp, err)
	}
	for _, want := range []string{"secret-detail", "recover_test.go"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error lacks %q (for the log): %v", want, err)
		}
	}
	st := status.Convert(apierror.Status(err, "req-1"))
	if st.Code() != codes.Internal || strings.Contains(st.Message(), "secret-detail") || !strings.Contains(st.Message(), "req-1") {
		t.Errorf("answer %v %q: want INTERNAL with the request id and no detail", st.Code(), st.Message())
	}

	sentinel := errors.New("refused")
	if resp, err := apierror.Recovered(func() (string, error) { return "ok", sentinel }); resp != "ok" || err != sentinel {
		t.Errorf("got %q, %v; want the call's own answer", resp, err)
	}
}
