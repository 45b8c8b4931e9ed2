package security

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// fakeAuth authenticates the identity named by the "client" metadata key against a
// mutable allowlist, or fails with err when set.
type fakeAuth struct {
	mu      sync.Mutex
	allowed map[ClientIdentity]ClientPolicy
	err     error
}

func newFakeAuth(ids ...ClientIdentity) *fakeAuth {
	a := &fakeAuth{allowed: map[ClientIdentity]ClientPolicy{}}
	for _, id := range ids {
		a.allowed[id] = ClientPolicy{MayAttestOwner: true}
	}
	return a
}

func (a *fakeAuth) Authenticate(ctx context.Context) (ClientIdentity, ClientPolicy, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err != nil {
		return "", ClientPolicy{}, a.err
	}
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("client"); len(v) == 1 {
		if p, ok := a.allowed[ClientIdentity(v[0])]; ok {
			return ClientIdentity(v[0]), p, nil
		}
		return "", ClientPolicy{}, ErrNotInPolicy
	}
	return "", ClientPolicy{}, ErrNoClientCertificate
}

func (a *fakeAuth) remove(id ClientIdentity) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.allowed, id)
}

func as(id ClientIdentity) context.Context {
	return metadata.NewIncomingContext(context.Background(), metadata.Pairs("client", string(id)))
}

// blocker is a handler that holds its call until released, so tests can fill limits.
type blocker struct {
	entered chan struct{}
	release chan struct{}
}

func newBlocker() *blocker {
	return &blocker{entered: make(chan struct{}, 64), release: make(chan struct{})}
}

func (b *blocker) handler(ctx context.Context, _ any) (any, error) {
	b.entered <- struct{}{}
	<-b.release
	return "done", nil
}

// hold starts n calls as id through the interceptor and waits until all are in the handler.
func hold(t *testing.T, l *RPCLimiter, b *blocker, id ClientIdentity, n int, wg *sync.WaitGroup) {
	t.Helper()
	for range n {
		wg.Go(func() {
			if _, err := l.UnaryInterceptor(translate)(as(id), nil, &grpc.UnaryServerInfo{}, b.handler); err != nil {
				t.Errorf("held call refused: %v", err)
			}
		})
		select {
		case <-b.entered:
		case <-time.After(handshakeTimeout):
			t.Fatal("held call never reached the handler")
		}
	}
}

// call makes one unary call as ctx and returns its status code and how long it took.
func call(l *RPCLimiter, ctx context.Context) (codes.Code, time.Duration) {
	start := time.Now()
	_, err := l.UnaryInterceptor(translate)(ctx, nil, &grpc.UnaryServerInfo{}, func(context.Context, any) (any, error) { return "ok", nil })
	return codeOf(err), time.Since(start)
}

func codeOf(err error) codes.Code { return status.Code(err) }

// failFast bounds a refusal: no waiting, only the bookkeeping.
const failFast = 100 * time.Millisecond

func mustLimiter(t *testing.T, auth Authenticator, global, client int) *RPCLimiter {
	t.Helper()
	l, err := NewRPCLimiter(auth, global, client)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestLimiterGlobalExhaustedFailsFast(t *testing.T) {
	l := mustLimiter(t, newFakeAuth(idCaller, idAdmin, idOther), 2, 2)
	b := newBlocker()
	var wg sync.WaitGroup
	hold(t, l, b, idCaller, 1, &wg)
	hold(t, l, b, idAdmin, 1, &wg)

	code, took := call(l, as(idOther))
	if code != codes.ResourceExhausted || took > failFast {
		t.Fatalf("call beyond the global limit: %v after %s; want ResourceExhausted at once", code, took)
	}
	close(b.release)
	wg.Wait()
	if code, _ := call(l, as(idOther)); code != codes.OK {
		t.Fatalf("after release: %v", code)
	}
	if s := l.Stats(); s.GlobalExhausted != 1 || s.Admitted != 3 || s.InFlight != 0 || s.Clients != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestLimiterClientQuotaIsolation(t *testing.T) {
	l := mustLimiter(t, newFakeAuth(idCaller, idAdmin), 10, 2)
	b := newBlocker()
	var wg sync.WaitGroup
	hold(t, l, b, idCaller, 2, &wg)

	code, took := call(l, as(idCaller))
	if code != codes.ResourceExhausted || took > failFast {
		t.Fatalf("the saturating client's next call: %v after %s", code, took)
	}
	for range 3 {
		if code, _ := call(l, as(idAdmin)); code != codes.OK {
			t.Fatalf("another client while the first saturates its quota: %v", code)
		}
	}
	close(b.release)
	wg.Wait()
	if s := l.Stats(); s.ClientExhausted != 1 || s.GlobalExhausted != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestLimiterRemovedClientDropped(t *testing.T) {
	auth := newFakeAuth(idCaller, idAdmin)
	l := mustLimiter(t, auth, 10, 5)
	b := newBlocker()
	var wg sync.WaitGroup
	hold(t, l, b, idCaller, 2, &wg)
	if s := l.Stats(); s.Clients != 1 {
		t.Fatalf("stats %+v", s)
	}
	auth.remove(idCaller)
	if code, _ := call(l, as(idCaller)); code != codes.Unauthenticated {
		t.Fatalf("removed client: %v", code)
	}
	close(b.release)
	wg.Wait()
	l.mu.Lock()
	_, present := l.clients[idCaller]
	size := len(l.clients)
	l.mu.Unlock()
	if present || size != 0 {
		t.Fatalf("per-client table keeps %d entries (removed client present: %v)", size, present)
	}
}

func TestLimiterAuthenticatesBeforeReserving(t *testing.T) {
	auth := newFakeAuth(idCaller)
	l := mustLimiter(t, auth, 1, 1)
	b := newBlocker()
	var wg sync.WaitGroup
	hold(t, l, b, idCaller, 1, &wg)
	// The limit is full, yet an unauthenticated caller learns nothing about it and takes
	// nothing: it is refused as unauthenticated.
	if code, _ := call(l, context.Background()); code != codes.Unauthenticated {
		t.Fatalf("unauthenticated caller at the limit: %v", code)
	}
	if code, _ := call(l, as(idOther)); code != codes.Unauthenticated {
		t.Fatalf("caller not in policy at the limit: %v", code)
	}
	close(b.release)
	wg.Wait()
	if s := l.Stats(); s.InFlight != 0 || s.Unauthenticated != 2 || s.GlobalExhausted != 0 || s.ClientExhausted != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestLimiterUnavailable(t *testing.T) {
	auth := newFakeAuth(idCaller)
	auth.err = ErrUnavailable
	l := mustLimiter(t, auth, 1, 1)
	_, err := l.UnaryInterceptor(translate)(as(idCaller), nil, &grpc.UnaryServerInfo{}, func(context.Context, any) (any, error) {
		t.Fatal("the handler ran")
		return nil, nil
	})
	wantStatus(t, err, codes.Unavailable, "UNAVAILABLE", true)
}

func TestLimiterHandlerSeesClient(t *testing.T) {
	l := mustLimiter(t, newFakeAuth(idCaller), 1, 1)
	_, err := l.UnaryInterceptor(translate)(as(idCaller), nil, &grpc.UnaryServerInfo{}, func(ctx context.Context, _ any) (any, error) {
		c, ok := ClientFromContext(ctx)
		if !ok || c.Identity != idCaller || !c.Policy.CanAttestOwner() {
			t.Errorf("handler saw %+v, %v", c, ok)
		}
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := ClientFromContext(context.Background()); ok {
		t.Fatal("a bare context carries a client")
	}
}

type fakeStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *fakeStream) Context() context.Context { return s.ctx }

func TestLimiterStreamInterceptor(t *testing.T) {
	l := mustLimiter(t, newFakeAuth(idCaller), 1, 1)
	err := l.StreamInterceptor(translate)(nil, &fakeStream{ctx: as(idCaller)}, &grpc.StreamServerInfo{}, func(_ any, ss grpc.ServerStream) error {
		if c, ok := ClientFromContext(ss.Context()); !ok || c.Identity != idCaller {
			t.Errorf("stream handler saw %+v", c)
		}
		// The stream holds its reservation while it runs.
		if code, _ := call(l, as(idCaller)); code != codes.ResourceExhausted {
			t.Errorf("a unary call while the stream runs: %v", code)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = l.StreamInterceptor(translate)(nil, &fakeStream{ctx: context.Background()}, &grpc.StreamServerInfo{}, func(any, grpc.ServerStream) error {
		t.Fatal("the stream handler ran")
		return nil
	})
	if codeOf(err) != codes.Unauthenticated {
		t.Fatalf("unauthenticated stream: %v", err)
	}
}

// TestLimiterConcurrent hammers the limiter from many goroutines and checks that the limits
// are never exceeded and everything is released.
func TestLimiterConcurrent(t *testing.T) {
	const global, perClient = 8, 3
	ids := []ClientIdentity{idCaller, idAdmin, idOther, idCreator}
	l := mustLimiter(t, newFakeAuth(ids...), global, perClient)
	var inFlight atomic.Int64
	var perID [4]atomic.Int64
	var violations atomic.Int64
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			i := g % len(ids)
			for range 200 {
				_, _ = l.UnaryInterceptor(translate)(as(ids[i]), nil, &grpc.UnaryServerInfo{}, func(context.Context, any) (any, error) {
					if inFlight.Add(1) > global || perID[i].Add(1) > perClient {
						violations.Add(1)
					}
					time.Sleep(10 * time.Microsecond)
					perID[i].Add(-1)
					inFlight.Add(-1)
					return nil, nil
				})
			}
		})
	}
	wg.Wait()
	if s := l.Stats(); violations.Load() != 0 || s.InFlight != 0 || s.Clients != 0 || s.Admitted == 0 {
		t.Fatalf("violations %d, stats %+v", violations.Load(), s)
	}
}

func TestNewRPCLimiterValidation(t *testing.T) {
	for _, tt := range []struct {
		auth           Authenticator
		global, client int
	}{
		{nil, 1, 1},
		{newFakeAuth(), 0, 1},
		{newFakeAuth(), 1, 0},
		{newFakeAuth(), 1, 2},
		{newFakeAuth(), MaxLimiterCapacity + 1, 1},
	} {
		if _, err := NewRPCLimiter(tt.auth, tt.global, tt.client); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("NewRPCLimiter(%v, %d, %d) = %v", tt.auth, tt.global, tt.client, err)
		}
	}
	if _, err := NewPeerAuthenticator(nil); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("NewPeerAuthenticator(nil) = %v", err)
	}
}

func TestAdmitReleaseIsIdempotent(t *testing.T) {
	l := mustLimiter(t, newFakeAuth(idCaller), 2, 2)
	_, release, err := l.Admit(as(idCaller))
	if err != nil {
		t.Fatal(err)
	}
	release()
	release()
	if s := l.Stats(); s.InFlight != 0 || s.Clients != 0 {
		t.Fatalf("stats %+v", s)
	}
}
