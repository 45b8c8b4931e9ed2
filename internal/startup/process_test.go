package startup

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/execplane/execplane/internal/security"
)

// Test bounds. Every wait polls against one of these deadlines; none is a bare sleep.
const (
	// serveDeadline bounds how long Serve may take to return once it was told to stop: the
	// longest grace below plus room for a loaded machine under -race.
	serveDeadline = 2 * time.Second
	// callDeadline bounds one RPC of the test's client.
	callDeadline = time.Second
)

// holdMethod is a unary method that blocks until the test releases it or its context ends.
const holdMethod = "/startup.test.Hold/Hold"

// verifyNoLeaks checks, after every other cleanup of t (cleanups run last in, first out),
// that nothing t started is still running.
func verifyNoLeaks(t *testing.T) {
	t.Helper()
	t.Cleanup(func() { goleak.VerifyNone(t) })
}

// events records, in order, what happened during a stop.
type events struct {
	mu   sync.Mutex
	list []string
}

func (e *events) add(s string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.list = append(e.list, s)
}

func (e *events) get() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.list...)
}

// hold is the handler of holdMethod.
type hold struct {
	entered chan struct{} // closed when a call arrived
	release chan struct{} // closed by the test: the call may finish
	cut     chan struct{} // closed when the call's context ended first
	log     *events
}

func newHold(log *events) *hold {
	return &hold{entered: make(chan struct{}), release: make(chan struct{}), cut: make(chan struct{}), log: log}
}

func (h *hold) register(s *grpc.Server) {
	s.RegisterService(&grpc.ServiceDesc{
		ServiceName: "startup.test.Hold",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Hold",
			Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				if err := dec(new(healthpb.HealthCheckRequest)); err != nil {
					return nil, err
				}
				close(h.entered)
				select {
				case <-h.release:
					h.log.add("call finished")
					return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
				case <-ctx.Done():
					close(h.cut)
					return nil, ctx.Err()
				}
			},
		}},
	}, struct{}{})
}

// newProcess is an opened Process without a cluster: a listener on a free port, a
// diagnostics server on another, and a security manager whose high-water mark lives in a
// fake clientset and whose manifest does not exist (it runs, refusing, until its context
// ends).
func newProcess(t *testing.T) *Process {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lis.Close() })
	manager, err := security.NewManager(security.ManagerConfig{
		ManifestPath: filepath.Join(t.TempDir(), "manifest.yaml"), Namespace: "execplane",
		HighWaterConfigMap: "execplane-security-high-water", Kube: fake.NewClientset(), Logger: hclog.NewNullLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg := validConfig()
	cfg.DiagnosticsAddress = "127.0.0.1:0"
	return &Process{cfg: cfg, Logger: hclog.NewNullLogger(), Registry: prometheus.NewRegistry(), Listener: lis, Security: manager}
}

// newGRPC is a plain server with the health service and holdMethod.
func newGRPC(h *hold) *grpc.Server {
	s := grpc.NewServer()
	healthpb.RegisterHealthServer(s, health.NewServer())
	h.register(s)
	return s
}

// dial is a client of addr, closed with t.
func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// check is one health check of conn, bounded by callDeadline.
func check(ctx context.Context, conn *grpc.ClientConn) error {
	ctx, cancel := context.WithTimeout(ctx, callDeadline)
	defer cancel()
	_, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

// checkNew is one health check on a new connection to addr, closed after it.
func checkNew(ctx context.Context, addr string) error {
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	return check(ctx, conn)
}

// refused reports whether a new connection to addr is refused: the listener is closed.
func refused(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, callDeadline)
	if err != nil {
		return true
	}
	_ = c.Close()
	return false
}

// await waits for ch to close, at most serveDeadline.
func await(t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(serveDeadline):
		t.Fatalf("timed out after %v waiting for: %s", serveDeadline, what)
	}
}

// serve runs p.Serve(ctx, s) and returns a function that waits for its error, at most
// serveDeadline. Whatever the test's end, Serve is stopped and waited for with t.
func serve(t *testing.T, ctx context.Context, p *Process, s Serving) (wait func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	var err error
	go func() { err = p.Serve(ctx, s); close(done) }()
	wait = func() error {
		t.Helper()
		select {
		case <-done:
			return err
		case <-time.After(serveDeadline):
			t.Fatalf("Serve did not return within %v", serveDeadline)
			return nil
		}
	}
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(serveDeadline):
			t.Errorf("Serve did not return within %v of the test's end", serveDeadline)
		}
	})
	return wait
}

// Cancelling ctx stops the process: Stopping runs while the API still serves, then the
// drain lets an in-flight call finish within the grace or cuts it after it, then Stopped
// runs, and Serve returns Work's answer.
func TestServeDrainsWithinGraceOnCancel(t *testing.T) {
	cases := []struct {
		name string
		// grace is the drain's bound. The call that finishes is released as soon as the
		// drain began, so its grace only needs room for a loaded machine; the test does
		// not wait it out.
		grace time.Duration
		// release lets the in-flight call finish once the drain began; otherwise it runs
		// until cut.
		release    bool
		wantCode   codes.Code
		wantEvents []string
	}{
		{
			name: "an in-flight call finishes within the grace", grace: time.Second, release: true, wantCode: codes.OK,
			wantEvents: []string{"stopping: API serving", "drain began: listener closed", "call finished", "stopped"},
		},
		{
			name: "an in-flight call longer than the grace is cut", grace: 200 * time.Millisecond, wantCode: codes.Unavailable,
			wantEvents: []string{"stopping: API serving", "drain began: listener closed", "stopped"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			verifyNoLeaks(t)
			var log events
			h := newHold(&log)
			p := newProcess(t)
			addr := p.Listener.Addr().String()
			var drainBegan, stoppedAt time.Time
			stopping := make(chan struct{})
			ctx, cancel := context.WithCancel(t.Context())
			wait := serve(t, ctx, p, Serving{
				GRPC: newGRPC(h), Ready: func() string { return "" }, Grace: tc.grace,
				Work: func(ctx context.Context) error { <-ctx.Done(); return nil },
				Stopping: func() {
					// A new connection still gets an answer: the drain has not begun.
					if err := checkNew(t.Context(), addr); err != nil {
						log.add("stopping: API not serving: " + err.Error())
					} else {
						log.add("stopping: API serving")
					}
					drainBegan = time.Now() // the drain begins as Stopping returns
					close(stopping)
				},
				Stopped: func() { stoppedAt = time.Now(); log.add("stopped") },
			})

			conn := dial(t, addr)
			if err := check(t.Context(), conn); err != nil {
				t.Fatalf("the API does not serve: %v", err)
			}
			callErr := make(chan error, 1)
			go func() {
				// Longer than Serve may take, so a drain that never cuts fails as such.
				ctx, cancelCall := context.WithTimeout(t.Context(), 2*serveDeadline)
				defer cancelCall()
				callErr <- conn.Invoke(ctx, holdMethod, &healthpb.HealthCheckRequest{}, new(healthpb.HealthCheckResponse))
			}()
			await(t, "the call to arrive", h.entered)

			cancel()
			await(t, "Stopping", stopping)
			clustertest.Eventually(t, serveDeadline, "the listener to close", func() bool { return refused(addr) })
			log.add("drain began: listener closed")
			if tc.release {
				close(h.release)
			}

			if err := wait(); err != nil {
				t.Errorf("Serve = %v, want nil (Work's answer)", err)
			}
			var err error
			select {
			case err = <-callErr:
			case <-time.After(2 * serveDeadline):
				t.Fatal("the in-flight call did not return")
			}
			if got := status.Code(err); got != tc.wantCode {
				t.Errorf("in-flight call: code %v (%v), want %v", got, err, tc.wantCode)
			}
			if diff := cmp.Diff(tc.wantEvents, log.get()); diff != "" {
				t.Errorf("stop order (-want +got):\n%s", diff)
			}
			if !tc.release {
				await(t, "the cut call's context to end", h.cut)
				if drained := stoppedAt.Sub(drainBegan); drained < tc.grace {
					t.Errorf("the call was cut after %v, before the grace %v", drained, tc.grace)
				}
			}
		})
	}
}

var errWork = errors.New("work failed")

// The first part to fail stops the others: Serve returns its error, Work's context ends,
// the servers drain and stop, and the listener is closed.
func TestServeStopsWhenAPartFails(t *testing.T) {
	cases := []struct {
		name string
		// closeListener closes the API's listener before Serve, so the gRPC server fails.
		closeListener bool
		// failWork makes Work fail once the API answered.
		failWork bool
		wantErr  error
	}{
		{name: "Work fails", failWork: true, wantErr: errWork},
		{name: "the gRPC server fails", closeListener: true, wantErr: net.ErrClosed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			verifyNoLeaks(t)
			var log events
			p := newProcess(t)
			addr := p.Listener.Addr().String()
			if tc.closeListener {
				if err := p.Listener.Close(); err != nil {
					t.Fatal(err)
				}
			}
			wait := serve(t, t.Context(), p, Serving{
				GRPC: newGRPC(newHold(&log)), Ready: func() string { return "" }, Grace: 200 * time.Millisecond,
				Work: func(ctx context.Context) error {
					if tc.failWork {
						// Fail only once serving, so it is Work's end that stops the servers.
						if err := checkNew(ctx, addr); err != nil {
							return err
						}
						log.add("work failed")
						return errWork
					}
					select {
					case <-ctx.Done():
						log.add("work's context ended")
						return ctx.Err()
					case <-time.After(serveDeadline / 2): // before Serve's deadline, to say why
						return errors.New("work's context did not end")
					}
				},
				Stopping: func() { log.add("stopping") },
				Stopped:  func() { log.add("stopped") },
			})

			err := wait()
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("Serve = %v, want %v", err, tc.wantErr)
			}
			want := []string{"work's context ended", "stopping", "stopped"}
			if tc.failWork {
				want[0] = "work failed"
			}
			if diff := cmp.Diff(want, log.get()); diff != "" {
				t.Errorf("stop order (-want +got):\n%s", diff)
			}
			if !refused(addr) {
				t.Errorf("a new connection to %s was accepted after Serve returned", addr)
			}
		})
	}
}
