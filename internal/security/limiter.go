package security

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
)

// RPCLimiter authenticates every RPC and bounds the calls in flight, globally and per client,
// failing fast: a call over a limit is refused at once with ErrGlobalLimit or ErrClientLimit
// (codes.ResourceExhausted), never queued. It authenticates before it reserves anything, so
// an unauthenticated peer can never take capacity from authenticated ones.
//
// The per-client table holds an entry only for an identity with calls in flight, created
// after that identity authenticated (so it was in the policy) and deleted when its last call
// ends: it is bounded by the allowlist and by the global limit, and a client removed from the
// policy disappears from it as soon as its last admitted call returns.
type RPCLimiter struct {
	auth      Authenticator
	globalMax int64
	clientMax int

	global atomic.Int64

	mu      sync.Mutex
	clients map[ClientIdentity]int

	admitted, unauthenticated, unavailable, globalRefused, clientRefused atomic.Uint64
}

// LimiterStats is a snapshot of an RPCLimiter's state and counters, for metrics.
type LimiterStats struct {
	// InFlight is the number of admitted calls still running.
	InFlight int
	// Clients is the number of identities with calls in flight (the per-client table's size).
	Clients int
	// Admitted counts calls admitted; the others count refusals by cause.
	Admitted, Unauthenticated, Unavailable, GlobalExhausted, ClientExhausted uint64
}

// NewRPCLimiter returns a limiter admitting at most globalMax calls in flight, and at most
// clientMax per client identity, after auth authenticated the caller. Both limits are
// 1..MaxLimiterCapacity and clientMax may not exceed globalMax. Refusals are plain errors
// of the vocabulary (pkg/apierror); the server that uses the limiter translates them.
func NewRPCLimiter(auth Authenticator, globalMax, clientMax int) (*RPCLimiter, error) {
	var errs []error
	if auth == nil {
		errs = append(errs, fmt.Errorf("%w: an authenticator is required", ErrInvalidConfig))
	}
	if globalMax < 1 || globalMax > MaxLimiterCapacity {
		errs = append(errs, fmt.Errorf("%w: global limit %d outside 1..%d", ErrInvalidConfig, globalMax, MaxLimiterCapacity))
	}
	if clientMax < 1 || clientMax > globalMax {
		errs = append(errs, fmt.Errorf("%w: client limit %d outside 1..%d (the global limit)", ErrInvalidConfig, clientMax, globalMax))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &RPCLimiter{
		auth:      auth,
		globalMax: int64(globalMax),
		clientMax: clientMax,
		clients:   make(map[ClientIdentity]int),
	}, nil
}

// UnaryInterceptor returns the interceptor admitting unary calls; a refusal is answered as
// translate makes it (apierror.Status at execplane's edges). The handler's context carries
// the authenticated Client (ClientFromContext).
func (l *RPCLimiter) UnaryInterceptor(translate func(error) error) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx, release, err := l.Admit(ctx)
		if err != nil {
			return nil, translate(err)
		}
		defer release()
		return handler(ctx, req)
	}
}

// StreamInterceptor returns the interceptor admitting streaming calls; a stream holds its
// reservation until the handler returns.
func (l *RPCLimiter) StreamInterceptor(translate func(error) error) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx, release, err := l.Admit(ss.Context())
		if err != nil {
			return translate(err)
		}
		defer release()
		return handler(srv, &clientStream{ServerStream: ss, ctx: ctx})
	}
}

// clientStream is a server stream whose context carries the authenticated Client.
type clientStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *clientStream) Context() context.Context { return s.ctx }

// Admit authenticates the caller of ctx and reserves a slot for it: first in its client's
// quota, then in the global one. It returns a context carrying the Client and a release
// function to call when the call ends (later calls of it do nothing), or an error with
// nothing reserved. The interceptors use it; it is exported for other transports.
func (l *RPCLimiter) Admit(ctx context.Context) (context.Context, func(), error) {
	id, policy, err := l.auth.Authenticate(ctx)
	if err != nil {
		if errors.Is(err, ErrUnavailable) {
			l.unavailable.Add(1)
		} else {
			l.unauthenticated.Add(1)
		}
		return nil, nil, err
	}
	if !l.reserveClient(id) {
		l.clientRefused.Add(1)
		return nil, nil, ErrClientLimit
	}
	if l.global.Add(1) > l.globalMax {
		l.global.Add(-1)
		l.releaseClient(id)
		l.globalRefused.Add(1)
		return nil, nil, ErrGlobalLimit
	}
	l.admitted.Add(1)
	var once sync.Once
	release := func() {
		once.Do(func() {
			l.global.Add(-1)
			l.releaseClient(id)
		})
	}
	return ContextWithClient(ctx, Client{Identity: id, Policy: policy}), release, nil
}

func (l *RPCLimiter) reserveClient(id ClientIdentity) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.clients[id]
	if n >= l.clientMax {
		return false
	}
	l.clients[id] = n + 1
	return true
}

func (l *RPCLimiter) releaseClient(id ClientIdentity) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := l.clients[id]; n > 1 {
		l.clients[id] = n - 1
	} else {
		delete(l.clients, id)
	}
}

// Stats returns the limiter's current state and counters.
func (l *RPCLimiter) Stats() LimiterStats {
	l.mu.Lock()
	clients := len(l.clients)
	l.mu.Unlock()
	return LimiterStats{
		InFlight:        int(l.global.Load()),
		Clients:         clients,
		Admitted:        l.admitted.Load(),
		Unauthenticated: l.unauthenticated.Load(),
		Unavailable:     l.unavailable.Load(),
		GlobalExhausted: l.globalRefused.Load(),
		ClientExhausted: l.clientRefused.Load(),
	}
}
