package security

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/execplane/execplane/pkg/apierror"
)

// grpcFixture is a gRPC server as the gateway will build it: NewServerCredentials over the
// current bundle, the RPC limiter with a PeerAuthenticator, a handshake timeout, and the
// standard health service as the handler. It records the Client each handler saw and the
// refused handshakes' reasons, and counts accepted TCP connections.
type grpcFixture struct {
	*fixture
	h       *holder
	addr    string
	limiter *RPCLimiter
	auth    *PeerAuthenticator
	accepts atomic.Int64

	mu      sync.Mutex
	seen    []Client
	rejects []Reason
}

func newGRPCFixture(t *testing.T) *grpcFixture {
	t.Helper()
	f := newFixture(t)
	g := &grpcFixture{fixture: f, h: newHolder(f.mustLoad())}
	var err error
	if g.auth, err = NewPeerAuthenticator(g.h.current); err != nil {
		t.Fatal(err)
	}
	if g.limiter, err = NewRPCLimiter(g.auth, 64, 16); err != nil {
		t.Fatal(err)
	}
	record := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if c, ok := ClientFromContext(ctx); ok {
			g.mu.Lock()
			g.seen = append(g.seen, c)
			g.mu.Unlock()
		}
		return handler(ctx, req)
	}
	srv := grpc.NewServer(
		grpc.Creds(NewServerCredentials(g.h.current, func(r Reason) {
			g.mu.Lock()
			g.rejects = append(g.rejects, r)
			g.mu.Unlock()
		}, nil)),
		grpc.ConnectionTimeout(HandshakeTimeout),
		grpc.ChainUnaryInterceptor(g.limiter.UnaryInterceptor(translate), record),
		grpc.ChainStreamInterceptor(g.limiter.StreamInterceptor(translate)),
	)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g.addr = ln.Addr().String()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(&countingListener{Listener: ln, n: &g.accepts})
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return g
}

type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// dial opens a client connection presenting cert.
func (g *grpcFixture) dial(t *testing.T, cert tls.Certificate) healthpb.HealthClient {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+g.addr, grpc.WithTransportCredentials(credentials.NewTLS(clientConfig(cert, g.roots()))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return healthpb.NewHealthClient(conn)
}

func check(t *testing.T, c healthpb.HealthClient) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), handshakeTimeout)
	defer cancel()
	_, err := c.Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

// wantStatus requires err to be a status with code and an ErrorInfo of reason.
func wantStatus(t *testing.T, err error, code codes.Code, reason string, retryable bool) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok || st.Code() != code {
		t.Fatalf("error = %v; want code %v", err, code)
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			if info.Reason != reason || info.Domain != apierror.Domain || info.Metadata["retryable"] != map[bool]string{true: "true", false: "false"}[retryable] {
				t.Fatalf("ErrorInfo = %v; want reason %s retryable %v", info, reason, retryable)
			}
			return
		}
	}
	t.Fatalf("status %v carries no ErrorInfo", st)
}

func TestGRPCAuthenticatedCall(t *testing.T) {
	g := newGRPCFixture(t)
	if err := check(t, g.dial(t, g.clientCert(g.res.Caller))); err != nil {
		t.Fatal(err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.seen) != 1 || g.seen[0].Identity != ClientIdentity(g.res.Caller.Identity) || !g.seen[0].Policy.CanAttestOwner() {
		t.Fatalf("handlers saw %+v", g.seen)
	}
}

// TestAuthRemovedFromPolicyOpenConnection removes the caller from the policy while it holds
// an open connection: its next RPC, on the same connection, is refused UNAUTHENTICATED by
// the limiter's authentication, and other clients are still served.
func TestAuthRemovedFromPolicyOpenConnection(t *testing.T) {
	g := newGRPCFixture(t)
	caller := g.dial(t, g.clientCert(g.res.Caller))
	admin := g.dial(t, g.clientCert(g.res.Administrator))
	if err := check(t, caller); err != nil {
		t.Fatal(err)
	}
	if err := check(t, admin); err != nil {
		t.Fatal(err)
	}
	accepted := g.accepts.Load()

	g.m.Generation++
	g.m.Clients = g.m.Clients[1:] // the caller is the first entry
	g.writeManifest()
	g.h.set(g.mustLoad())

	wantStatus(t, check(t, caller), codes.Unauthenticated, "UNAUTHENTICATED", false)
	if err := check(t, admin); err != nil {
		t.Fatal(err)
	}
	if n := g.accepts.Load(); n != accepted {
		t.Fatalf("%d new connections: the refusal did not happen on the open connection", n-accepted)
	}
	if s := g.limiter.Stats(); s.Unauthenticated != 1 || s.Clients != 0 || s.InFlight != 0 {
		t.Fatalf("limiter stats %+v", s)
	}
	// A new connection of the removed client fails at the handshake.
	if err := check(t, g.dial(t, g.clientCert(g.res.Caller))); status.Code(err) != codes.Unavailable {
		t.Fatalf("new connection of a removed client: %v", err)
	}
}

func TestGRPCUnavailableWithoutBundle(t *testing.T) {
	g := newGRPCFixture(t)
	caller := g.dial(t, g.clientCert(g.res.Caller))
	if err := check(t, caller); err != nil {
		t.Fatal(err)
	}
	g.h.set(nil)
	wantStatus(t, check(t, caller), codes.Unavailable, "UNAVAILABLE", true)
	if s := g.limiter.Stats(); s.Unavailable != 1 {
		t.Fatalf("limiter stats %+v", s)
	}
}

func TestGRPCHandshakeRejectionsReported(t *testing.T) {
	g := newGRPCFixture(t)
	_ = check(t, g.dial(t, g.issueClient("spiffe://execplane.test/client/stranger")))
	// The server records the rejection once its side of the handshake returns, which can be
	// just after the client has seen the alert: poll.
	deadline := time.Now().Add(5 * time.Second)
	for {
		g.mu.Lock()
		rejects := append([]Reason(nil), g.rejects...)
		g.mu.Unlock()
		if len(rejects) > 0 {
			if rejects[0] != ReasonNotInPolicy {
				t.Fatalf("rejections %v; want [%s ...]", rejects, ReasonNotInPolicy)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no rejection reported; want [%s ...]", ReasonNotInPolicy)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPeerAuthenticatorCertificateExpiredOnOpenConnection: a certificate that expires while
// its connection stays open is refused on the next RPC.
func TestPeerAuthenticatorCertificateExpiredOnOpenConnection(t *testing.T) {
	g := newGRPCFixture(t)
	caller := g.dial(t, g.clientCert(g.res.Caller))
	if err := check(t, caller); err != nil {
		t.Fatal(err)
	}
	g.auth.now = func() time.Time { return time.Now().Add(30 * 24 * time.Hour) }
	wantStatus(t, check(t, caller), codes.Unauthenticated, "UNAUTHENTICATED", false)
}

// TestAuthSlowHandshakeClosed: a client that connects and stalls (sends nothing, or half a
// ClientHello) is cut off by HandshakeDeadlineListener's deadline, on a raw TLS server.
func TestAuthSlowHandshakeClosed(t *testing.T) {
	const timeout = 200 * time.Millisecond
	f := newFixture(t)
	b := f.mustLoad()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := HandshakeDeadlineListener(inner, timeout)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, prefix := range [][]byte{nil, {0x16, 0x03, 0x01, 0x02, 0x00, 0x01}} {
		results := make(chan error, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				results <- err
				return
			}
			defer c.Close()
			results <- tls.Server(c, TLSConfig(b.ServerCertificate(), b.ClientCAs())).Handshake()
		}()
		start := time.Now()
		stalled := stallingClient(t, ln.Addr().String(), prefix)
		select {
		case err := <-results:
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				t.Fatalf("server handshake error %v; want a timeout", err)
			}
		case <-time.After(handshakeTimeout):
			t.Fatal("the stalled handshake was not cut off")
		}
		if d := time.Since(start); d < timeout || d > timeout+pathologicalBound {
			t.Fatalf("cut off after %s; want about %s", d, timeout)
		}
		waitClosed(t, stalled)
	}
	if _, err := HandshakeDeadlineListener(nil, time.Second); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("nil listener: %v", err)
	}
}

// TestAuthSlowHandshakeClosedGRPC: the same under gRPC, whose ConnectionTimeout covers the
// handshake and the HTTP/2 preface.
func TestAuthSlowHandshakeClosedGRPC(t *testing.T) {
	const timeout = 200 * time.Millisecond
	f := newFixture(t)
	h := newHolder(f.mustLoad())
	srv := grpc.NewServer(grpc.Creds(NewServerCredentials(h.current, nil, nil)), grpc.ConnectionTimeout(timeout))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	defer func() { srv.Stop(); <-done }()

	start := time.Now()
	waitClosed(t, stallingClient(t, ln.Addr().String(), nil))
	if d := time.Since(start); d < timeout || d > timeout+pathologicalBound {
		t.Fatalf("closed after %s; want about %s", d, timeout)
	}
}

// stallingClient connects, writes prefix and then nothing.
func stallingClient(t *testing.T, addr string, prefix []byte) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if len(prefix) > 0 {
		if _, err := c.Write(prefix); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// waitClosed waits until the server closes c (a read ends).
func waitClosed(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(handshakeTimeout))
	_, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the server did not close the stalled connection")
	}
}
