package security

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/peer"
)

// Authenticator authenticates the caller of an RPC. It is the RPC limiter's one dependency,
// kept narrow so that tests and other transports can supply their own.
type Authenticator interface {
	// Authenticate returns the caller's identity and current policy. Errors match
	// ErrUnauthenticated (no or bad identity, not in policy) or ErrUnavailable (no valid
	// security material).
	Authenticate(ctx context.Context) (ClientIdentity, ClientPolicy, error)
}

// PeerAuthenticator authenticates gRPC callers from the connection's AuthInfo (set by
// NewServerCredentials) against the current bundle, on every RPC: a client removed from the
// policy is refused on its next call, even on a connection opened while it was in it, and a
// client certificate that expired while its connection stayed open is refused too.
//
// A change of the client CA bundle applies to new handshakes; connections already
// authenticated under a CA that was since removed keep their identity until they close.
type PeerAuthenticator struct {
	current func() (*Bundle, bool)
	now     func() time.Time
}

// NewPeerAuthenticator returns an authenticator reading the current bundle from current.
func NewPeerAuthenticator(current func() (*Bundle, bool)) (*PeerAuthenticator, error) {
	if current == nil {
		return nil, fmt.Errorf("%w: a current-bundle function is required", ErrInvalidConfig)
	}
	return &PeerAuthenticator{current: current, now: time.Now}, nil
}

// Authenticate implements Authenticator. Without a valid bundle every call answers
// ErrUnavailable, before the peer is even looked at: the service fails closed.
func (a *PeerAuthenticator) Authenticate(ctx context.Context) (ClientIdentity, ClientPolicy, error) {
	b, ok := a.current()
	if !ok || b == nil || b.policies == nil {
		return "", ClientPolicy{}, ErrUnavailable
	}
	p, ok := peer.FromContext(ctx)
	if !ok {
		return "", ClientPolicy{}, fmt.Errorf("%w: no peer", ErrUnauthenticated)
	}
	info, ok := p.AuthInfo.(AuthInfo)
	if !ok || info.Identity == "" || len(info.State.PeerCertificates) == 0 {
		return "", ClientPolicy{}, fmt.Errorf("%w: the connection was not authenticated by this server's credentials", ErrUnauthenticated)
	}
	if !validAt(info.State.PeerCertificates[0], a.now()) {
		return "", ClientPolicy{}, ErrCertificateExpired
	}
	policy, ok := b.policies.Lookup(info.Identity)
	if !ok {
		return "", ClientPolicy{}, ErrNotInPolicy
	}
	return info.Identity, policy, nil
}

// Client is an authenticated caller: its identity and the policy that applied when its
// call was admitted.
type Client struct {
	Identity ClientIdentity
	Policy   ClientPolicy
}

// clientKey is the context key of the authenticated Client; unexported, so only this package
// can set it.
type clientKey struct{}

// ContextWithClient returns ctx carrying c. The RPC limiter sets it after authentication;
// tests of handlers may set it directly.
func ContextWithClient(ctx context.Context, c Client) context.Context {
	return context.WithValue(ctx, clientKey{}, c)
}

// ClientFromContext returns the authenticated caller of the RPC, and false when there is
// none (the handler was reached without the limiter's interceptor: refuse).
func ClientFromContext(ctx context.Context) (Client, bool) {
	c, ok := ctx.Value(clientKey{}).(Client)
	return c, ok && c.Identity != ""
}
