package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/execplane/execplane/pkg/apierror"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	"github.com/execplane/execplane/proto/execution/v1/executionv1grpc"
)

// fakeGateway answers from a script: a narrow stand-in for the gateway's wire behaviour
// (codes, ErrorInfo, the request-id header), to test the SDK's retry and error handling.
// The end-to-end tests run the SDK against the real processes.
type fakeGateway struct {
	executionv1grpc.UnimplementedExecutionProviderServiceServer
	mu      sync.Mutex
	calls   map[string][]string // method → operation ids (or "" when the call has none)
	answers map[string][]error  // method → errors to answer in turn, then success
}

func (f *fakeGateway) next(ctx context.Context, method, op string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[method] = append(f.calls[method], op)
	_ = grpc.SetHeader(ctx, metadata.Pairs(requestIDHeader, "req-1"))
	if a := f.answers[method]; len(a) > 0 {
		f.answers[method] = a[1:]
		return a[0]
	}
	return nil
}

func (f *fakeGateway) count(method string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls[method]...)
}

var testEnv = &executionv1.Environment{Ref: &executionv1.EnvironmentRef{Id: "env-1", Revision: "5f0e1a1e-0000-4000-8000-000000000001"}, Ready: true}

func (f *fakeGateway) EnsureEnvironment(ctx context.Context, r *executionv1.EnsureEnvironmentRequest) (*executionv1.EnsureEnvironmentResponse, error) {
	if err := f.next(ctx, "Ensure", r.GetOperationId()); err != nil {
		return nil, err
	}
	return &executionv1.EnsureEnvironmentResponse{Environment: testEnv, EnvironmentGrant: &executionv1.Grant{Token: "env"}, Created: true}, nil
}

func (f *fakeGateway) AcquireRun(ctx context.Context, r *executionv1.AcquireRunRequest) (*executionv1.AcquireRunResponse, error) {
	if err := f.next(ctx, "AcquireRun", r.GetOperationId()); err != nil {
		return nil, err
	}
	return &executionv1.AcquireRunResponse{Environment: testEnv, RunGrant: &executionv1.Grant{Token: "run"}, Run: &executionv1.RunClaim{RunId: r.GetRunId()}}, nil
}

func (f *fakeGateway) AttachEnvironment(ctx context.Context, _ *executionv1.AttachEnvironmentRequest) (*executionv1.AttachEnvironmentResponse, error) {
	if err := f.next(ctx, "Attach", ""); err != nil {
		return nil, err
	}
	return &executionv1.AttachEnvironmentResponse{Environment: testEnv, EnvironmentGrant: &executionv1.Grant{Token: "env-2"}}, nil
}

func (f *fakeGateway) RenewRun(ctx context.Context, _ *executionv1.RenewRunRequest) (*executionv1.RenewRunResponse, error) {
	if err := f.next(ctx, "RenewRun", ""); err != nil {
		return nil, err
	}
	return &executionv1.RenewRunResponse{RunGrant: &executionv1.Grant{Token: "run-2"}, Run: &executionv1.RunClaim{RunId: "r"}}, nil
}

func (f *fakeGateway) ReleaseRun(ctx context.Context, _ *executionv1.ReleaseRunRequest) (*executionv1.ReleaseRunResponse, error) {
	if err := f.next(ctx, "ReleaseRun", ""); err != nil {
		return nil, err
	}
	return &executionv1.ReleaseRunResponse{Environment: testEnv}, nil
}

func (f *fakeGateway) Files(ctx context.Context, r *executionv1.FilesRequest) (*executionv1.FilesResponse, error) {
	method := "Files"
	if r.GetOperation().GetWrite() != nil {
		method = "Write"
	}
	if err := f.next(ctx, method, ""); err != nil {
		return nil, err
	}
	if r.GetOperation().GetWrite() != nil {
		return &executionv1.FilesResponse{Result: &executionv1.FileResult{Result: &executionv1.FileResult_Write{Write: &executionv1.WriteFileResult{Info: &executionv1.FileInfo{Version: "v1"}}}}}, nil
	}
	return &executionv1.FilesResponse{Result: &executionv1.FileResult{Result: &executionv1.FileResult_Stat{Stat: &executionv1.StatFileResult{Info: &executionv1.FileInfo{Path: []byte("a")}}}}}, nil
}

func (f *fakeGateway) StartCommand(ctx context.Context, _ *executionv1.StartCommandRequest) (*executionv1.StartCommandResponse, error) {
	if err := f.next(ctx, "StartCommand", ""); err != nil {
		return nil, err
	}
	return &executionv1.StartCommandResponse{Result: &executionv1.CommandResult{State: executionv1.CommandState_COMMAND_STATE_SUCCEEDED}}, nil
}

// answer is a status as the gateway's edge builds it.
func answer(code codes.Code, reason string, retryable bool) error {
	st, _ := status.New(code, "scripted").WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: apierror.Domain,
		Metadata: map[string]string{"retryable": map[bool]string{true: "true", false: "false"}[retryable]}})
	return st.Err()
}

func start(t *testing.T, answers map[string][]error) (*Client, *fakeGateway) {
	t.Helper()
	f := &fakeGateway{calls: map[string][]string{}, answers: answers}
	l := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	executionv1grpc.RegisterExecutionProviderServiceServer(srv, f)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///bufnet", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return l.DialContext(ctx) }))
	if err != nil {
		t.Fatal(err)
	}
	c := NewFromConn(conn, Config{MaxAttempts: 4, InitialBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond})
	t.Cleanup(func() { c.Close() })
	return c, f
}

func acquired(t *testing.T, c *Client) *Run {
	t.Helper()
	ctx := t.Context()
	env, err := c.Ensure(ctx, EnsureRequest{Owner: Owner{Issuer: "i", Subject: "s"}, BindingID: "b", Profile: "p"})
	if err != nil {
		t.Fatal(err)
	}
	run, err := env.Acquire(ctx, AcquireOptions{RunID: "r", NoRenew: true})
	if err != nil {
		t.Fatal(err)
	}
	return run
}

func TestRetryReusesTheOperationID(t *testing.T) {
	unavailable := answer(codes.Unavailable, "UNAVAILABLE", true)
	c, f := start(t, map[string][]error{"Ensure": {unavailable, unavailable}})
	if _, err := c.Ensure(t.Context(), EnsureRequest{Owner: Owner{Issuer: "i", Subject: "s"}, BindingID: "b", Profile: "p"}); err != nil {
		t.Fatal(err)
	}
	ops := f.count("Ensure")
	if len(ops) != 3 || ops[0] != ops[1] || ops[1] != ops[2] || ops[0] == "" {
		t.Fatalf("attempts with operation ids %q, want 3 with one id", ops)
	}
	// A second logical call gets another id.
	if _, err := c.Ensure(t.Context(), EnsureRequest{Owner: Owner{Issuer: "i", Subject: "s"}, BindingID: "b", Profile: "p"}); err != nil {
		t.Fatal(err)
	}
	if ops = f.count("Ensure"); ops[3] == ops[0] {
		t.Fatal("two logical calls shared an operation id")
	}
}

func TestRetriesAreBounded(t *testing.T) {
	u := answer(codes.Unavailable, "UNAVAILABLE", true)
	c, f := start(t, map[string][]error{"Ensure": {u, u, u, u, u, u}})
	_, err := c.Ensure(t.Context(), EnsureRequest{BindingID: "b"})
	if !errors.Is(err, ErrUnavailable) || len(f.count("Ensure")) != 4 {
		t.Fatalf("%v after %d attempts, want ErrUnavailable after 4", err, len(f.count("Ensure")))
	}
}

func TestWhatIsNeverRetried(t *testing.T) {
	transport := status.Error(codes.Unavailable, "connection reset") // no ErrorInfo: no answer from execplane
	cases := []struct {
		name, method string
		answers      []error
		call         func(context.Context, *Run) error
		attempts     int
		want         error
	}{
		{"a refusal", "Files", []error{answer(codes.NotFound, "NOT_FOUND", false)},
			func(ctx context.Context, r *Run) error { _, err := r.Stat(ctx, "a"); return err }, 1, ErrNotFound},
		{"an unknown outcome", "StartCommand", []error{answer(codes.Unknown, "OUTCOME_UNKNOWN", false)},
			func(ctx context.Context, r *Run) error {
				_, err := r.Run(ctx, Command{Args: []string{"true"}})
				return err
			}, 1, ErrOutcomeUnknown},
		{"a transport failure of a write", "Write", []error{transport},
			func(ctx context.Context, r *Run) error { _, err := r.WriteFile(ctx, "a", nil); return err }, 1, ErrUnavailable},
		{"a transport failure of a command", "StartCommand", []error{transport},
			func(ctx context.Context, r *Run) error { _, err := r.Run(ctx, Command{Shell: "true"}); return err }, 1, ErrUnavailable},
		{"a cut call of a write, even if flagged retryable", "Write", []error{answer(codes.Canceled, "UNAVAILABLE", true)},
			func(ctx context.Context, r *Run) error { _, err := r.WriteFile(ctx, "a", nil); return err }, 1, context.Canceled},
		// Retried: a transport failure of a read; a refusal the server says did nothing.
		{"a transport failure of a stat", "Files", []error{transport},
			func(ctx context.Context, r *Run) error { _, err := r.Stat(ctx, "a"); return err }, 2, nil},
		{"a busy environment", "StartCommand", []error{answer(codes.ResourceExhausted, "LIMIT_EXCEEDED", true)},
			func(ctx context.Context, r *Run) error { _, err := r.Run(ctx, Command{Shell: "true"}); return err }, 2, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, f := start(t, map[string][]error{tc.method: tc.answers})
			err := tc.call(t.Context(), acquired(t, c))
			if got := len(f.count(tc.method)); got != tc.attempts {
				t.Errorf("%d attempts, want %d", got, tc.attempts)
			}
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("got %v, want %v", err, tc.want)
			}
		})
	}
}

func TestErrorsCarryReasonAndRequestID(t *testing.T) {
	c, _ := start(t, map[string][]error{"Write": {answer(codes.Aborted, "VERSION_MISMATCH", false)}})
	_, err := acquired(t, c).WriteFile(t.Context(), "a", []byte("x"), IfVersion("v0"))
	var e *Error
	if !errors.As(err, &e) || e.RequestID != "req-1" || e.Reason != "VERSION_MISMATCH" || e.Retryable {
		t.Fatalf("%#v", err)
	}
	for _, k := range []error{ErrVersionMismatch, ErrConflict} {
		if !errors.Is(err, k) {
			t.Errorf("not %v", k)
		}
	}
	for _, k := range []error{ErrStaleEpoch, ErrNotFound, ErrFenced} {
		if errors.Is(err, k) {
			t.Errorf("is %v", k)
		}
	}
}

func TestAcquireRefreshesAnExpiredEnvironmentGrant(t *testing.T) {
	c, f := start(t, map[string][]error{"AcquireRun": {answer(codes.Unauthenticated, "GRANT_INVALID", false)}})
	acquired(t, c)
	if got := len(f.count("Attach")); got != 1 {
		t.Fatalf("%d attaches, want one refresh", got)
	}
	ops := f.count("AcquireRun")
	if len(ops) != 2 || ops[0] == ops[1] {
		t.Fatalf("acquire attempts %q: want two, the second with a fresh operation id", ops)
	}
}

func TestClosedRunRefusesCalls(t *testing.T) {
	c, f := start(t, nil)
	run := acquired(t, c)
	// Released even though the caller's context has ended (defer run.Close(ctx) after an
	// aborted turn).
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := run.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	if n := len(f.count("ReleaseRun")); n != 1 {
		t.Fatalf("%d releases, want 1", n)
	}
	if err := run.Close(t.Context()); err != nil || len(f.count("ReleaseRun")) != 1 {
		t.Fatalf("a second close released again (%v)", err)
	}
	if _, err := run.Stat(t.Context(), "a"); !errors.Is(err, errRunClosed) {
		t.Fatalf("stat after close: %v", err)
	}
	if n := len(f.count("Files")); n != 0 {
		t.Fatalf("%d file calls reached the gateway after close", n)
	}
}

func TestOnlyAnEndedClaimEndsTheRun(t *testing.T) {
	c, f := start(t, map[string][]error{"RenewRun": {answer(codes.Internal, "INTERNAL", false), answer(codes.Aborted, "STALE_EPOCH", false)}})
	run := acquired(t, c)
	if err := run.Renew(t.Context()); !errors.Is(err, ErrInternal) || run.Err() != nil {
		t.Fatalf("a transient failure: %v, run error %v", err, run.Err())
	}
	if err := run.Renew(t.Context()); !errors.Is(err, ErrStaleEpoch) || !errors.Is(run.Err(), ErrStaleEpoch) {
		t.Fatalf("a superseded claim: %v, run error %v", err, run.Err())
	}
	if _, err := run.Stat(t.Context(), "a"); !errors.Is(err, ErrStaleEpoch) {
		t.Fatalf("a call on the ended run: %v", err)
	}
	if err := run.Close(t.Context()); err != nil || len(f.count("ReleaseRun")) != 0 {
		t.Fatalf("an ended claim was released (%v)", err)
	}
}

func TestACutWriteIsAnUnknownOutcome(t *testing.T) {
	c, _ := start(t, map[string][]error{"Write": {status.Error(codes.DeadlineExceeded, "context deadline exceeded")}})
	_, err := acquired(t, c).WriteFile(t.Context(), "a", []byte("x"))
	if !errors.Is(err, ErrOutcomeUnknown) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v", err)
	}
}

func TestRenewalEndsWithTheClient(t *testing.T) {
	c, _ := start(t, nil)
	env, err := c.Ensure(t.Context(), EnsureRequest{BindingID: "b", NoWait: true})
	if err != nil {
		t.Fatal(err)
	}
	run, err := env.Acquire(t.Context(), AcquireOptions{RunID: "r"})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	select {
	case <-run.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the renewal goroutine outlived its client")
	}
}

// sdkClass is the SDK's named class for each class of the server's vocabulary.
var sdkClass = map[*apierror.Error]error{
	apierror.ErrInvalidArgument: ErrInvalidArgument, apierror.ErrUnauthenticated: ErrUnauthenticated,
	apierror.ErrGrantInvalid: ErrGrantInvalid, apierror.ErrPermissionDenied: ErrPermissionDenied,
	apierror.ErrPathEscape: ErrPathEscape, apierror.ErrNotFound: ErrNotFound, apierror.ErrAlreadyExists: ErrAlreadyExists,
	apierror.ErrConflict: ErrConflict, apierror.ErrStaleEpoch: ErrStaleEpoch, apierror.ErrRevoked: ErrRevoked,
	apierror.ErrVersionMismatch: ErrVersionMismatch, apierror.ErrOperationIDReused: ErrOperationIDReused,
	apierror.ErrRunClaimHeld: ErrRunClaimHeld, apierror.ErrPreconditionMismatch: ErrPreconditionFailed,
	apierror.ErrProfileMismatch: ErrPreconditionFailed, apierror.ErrFenced: ErrFenced, apierror.ErrNotReady: ErrNotReady,
	apierror.ErrWrongType: ErrWrongType, apierror.ErrLimitExceeded: ErrExhausted, apierror.ErrBusy: ErrExhausted,
	apierror.ErrUnavailable: ErrUnavailable, apierror.ErrExecutorUnreachable: ErrUnavailable,
	apierror.ErrOutcomeUnknown: ErrOutcomeUnknown, apierror.ErrUnimplemented: ErrUnimplemented, apierror.ErrInternal: ErrInternal,
	apierror.ErrRecordUnverified: ErrRecordUnverified, apierror.ErrQuotaExceeded: ErrQuotaExceeded,
}

// A quota refusal's metadata reaches the caller, and the refusal is also an ErrExhausted.
func TestQuotaRefusalCarriesItsQuota(t *testing.T) {
	md := map[string]string{"quota": "environments", "scope": "owner", "limit": "10", "used": "10"}
	sent := apierror.Status(apierror.WithMetadata(fmt.Errorf("%w: the owner quota environments", apierror.ErrQuotaExceeded), md), "rid")
	c, _ := start(t, map[string][]error{"Attach": {sent}})
	_, err := c.Attach(t.Context(), AttachRequest{Owner: Owner{Issuer: "i", Subject: "s"}, BindingID: "b", ID: "env-1", Revision: testEnv.Ref.Revision})
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, ErrQuotaExceeded) || !errors.Is(err, ErrExhausted) {
		t.Fatalf("got %v", err)
	}
	if diff := cmp.Diff(md, e.Metadata); diff != "" {
		t.Errorf("metadata (-sent +got):\n%s", diff)
	}
}

// TestEveryReasonRoundTrips: every class of the server's vocabulary, answered as the edge
// answers it (apierror.Status), reaches an SDK caller with its code, reason and retryable
// flag, matches its own class and the SDK's named one with errors.Is, and no other reason.
func TestEveryReasonRoundTrips(t *testing.T) {
	for _, class := range apierror.Vocabulary() {
		t.Run(apierror.ReasonName(class.Reason())+"/"+class.Code().String(), func(t *testing.T) {
			sent := apierror.Status(fmt.Errorf("%w: detail", class), "rid")
			c, _ := start(t, map[string][]error{"Attach": {sent, sent, sent, sent}})
			_, err := c.Attach(t.Context(), AttachRequest{Owner: Owner{Issuer: "i", Subject: "s"}, BindingID: "b", ID: "env-1", Revision: testEnv.Ref.Revision})
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("not an *Error: %v", err)
			}
			want := Error{Code: class.Code(), Reason: apierror.ReasonName(class.Reason()), Retryable: class.Retryable(), Message: status.Convert(sent).Message(), RequestID: "req-1"}
			if diff := cmp.Diff(want, *e); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			named, ok := sdkClass[class]
			if !ok {
				t.Fatalf("no SDK class for %v", class)
			}
			if !errors.Is(err, class) || !errors.Is(err, named) {
				t.Errorf("errors.Is: own class %v, SDK class %v", errors.Is(err, class), errors.Is(err, named))
			}
			for _, other := range apierror.Vocabulary() {
				if other.Reason() != class.Reason() && errors.Is(err, other) {
					t.Errorf("also matches %v", other)
				}
			}
		})
	}
}
