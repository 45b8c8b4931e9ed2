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
	// Conn is the connection as the ConnAdmitter returned it (nil without one), so a call
	// can find its connection's accounting.
	Conn net.Conn
}

// ConnAdmitter admits an authenticated connection: it may refuse it (a per-client cap) or
// return it wrapped (to account for what is written to it). gRPC then serves what it
// returns.
type ConnAdmitter func(conn net.Conn, id ClientIdentity) (net.Conn, error)

// NewServerCredentials returns gRPC server transport credentials over ServerTLSConfig(current)
// whose connections carry an AuthInfo. onReject, if not nil, is called once for every
// handshake that fails, with a bounded reason (for a metric); it must not block. admit, if
// not nil, admits each authenticated connection (its refusal counts as ReasonConnectionLimit
// when it wraps ErrConnectionLimit).
//
// Bound the handshake with grpc.ConnectionTimeout (HandshakeTimeout is the recommended
// value): gRPC sets that deadline on the connection before calling ServerHandshake and
// clears it after the HTTP/2 preface, so it covers a client that stalls mid-handshake.
func NewServerCredentials(current func() (*Bundle, bool), onReject func(Reason), admit ConnAdmitter) credentials.TransportCredentials {
	return &serverCredentials{inner: credentials.NewTLS(ServerTLSConfig(current)), onReject: onReject, admit: admit}
}

type serverCredentials struct {
	inner    credentials.TransportCredentials
	onReject func(Reason)
	admit    ConnAdmitter
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
	if c.admit != nil {
		admitted, err := c.admit(conn, id)
		if err != nil {
			conn.Close()
			c.reject(err)
			return nil, nil, err
		}
		conn = admitted
	}
	return conn, AuthInfo{TLSInfo: tlsInfo, Identity: id, Conn: conn}, nil
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
	return &serverCredentials{inner: c.inner.Clone(), onReject: c.onReject, admit: c.admit}
}

// OverrideServerName is a client-side setting (and deprecated in gRPC); it does nothing here.
func (c *serverCredentials) OverrideServerName(string) error { return nil }
