package security

import (
	"context"
	"errors"
	"net"

	"google.golang.org/grpc/credentials"
)

// AuthInfo is the authentication of a connection accepted by NewServerCredentials: the TLS
// state (embedded, so gRPC sees the usual security level and channelz details) and the
// client identity, verified during the handshake against the bundle current then. The
// PeerAuthenticator accepts no other kind of peer, so an RPC can only be authenticated on a
// connection whose handshake ran verifyClient.
type AuthInfo struct {
	credentials.TLSInfo
	// Identity is the client's identity (its canonical URI SAN).
	Identity ClientIdentity
}

// NewServerCredentials returns gRPC server transport credentials over ServerTLSConfig(current)
// whose connections carry an AuthInfo. onReject, if not nil, is called once for every
// handshake that fails, with a bounded reason (for a metric); it must not block.
//
// Bound the handshake with grpc.ConnectionTimeout (HandshakeTimeout is the recommended
// value): gRPC sets that deadline on the connection before calling ServerHandshake and
// clears it after the HTTP/2 preface, so it covers a client that stalls mid-handshake.
func NewServerCredentials(current func() (*Bundle, bool), onReject func(Reason)) credentials.TransportCredentials {
	return &serverCredentials{inner: credentials.NewTLS(ServerTLSConfig(current)), onReject: onReject}
}

type serverCredentials struct {
	inner    credentials.TransportCredentials
	onReject func(Reason)
}

func (c *serverCredentials) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.inner.ServerHandshake(raw)
	if err != nil {
		c.reject(err)
		return nil, nil, err
	}
	tlsInfo, ok := info.(credentials.TLSInfo)
	if !ok || len(tlsInfo.State.PeerCertificates) == 0 {
		conn.Close()
		c.reject(ErrNoClientCertificate)
		return nil, nil, ErrNoClientCertificate
	}
	// verifyClient accepted this leaf during the handshake; the identity is derived again
	// from it rather than carried across crypto/tls, which has no per-connection slot.
	id, err := IdentityFromCertificate(tlsInfo.State.PeerCertificates[0])
	if err != nil {
		conn.Close()
		c.reject(err)
		return nil, nil, err
	}
	return conn, AuthInfo{TLSInfo: tlsInfo, Identity: id}, nil
}

func (c *serverCredentials) reject(err error) {
	if c.onReject != nil {
		c.onReject(ReasonOf(err))
	}
}

// errClientSide: these credentials only serve.
var errClientSide = errors.New("security: server credentials cannot be used by a client")

func (c *serverCredentials) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errClientSide
}

func (c *serverCredentials) Info() credentials.ProtocolInfo { return c.inner.Info() }

func (c *serverCredentials) Clone() credentials.TransportCredentials {
	return &serverCredentials{inner: c.inner.Clone(), onReject: c.onReject}
}

// OverrideServerName is a client-side setting (and deprecated in gRPC); it does nothing here.
func (c *serverCredentials) OverrideServerName(string) error { return nil }
