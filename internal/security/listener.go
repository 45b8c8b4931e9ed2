package security

import (
	"fmt"
	"net"
	"time"
)

// HandshakeDeadlineListener wraps l so that every accepted connection has a deadline of
// timeout from its acceptance: a client that connects and then stalls (sends nothing, or
// half a handshake) is cut off when it passes, and its socket and goroutine are released.
//
// The deadline covers the handshake and whatever the server reads or writes first. A server
// that takes the connection over resets it: gRPC sets its own deadline (grpc.ConnectionTimeout)
// before the handshake and clears it after the HTTP/2 preface; a server doing TLS itself
// clears it with SetDeadline(time.Time{}) once Handshake returns.
func HandshakeDeadlineListener(l net.Listener, timeout time.Duration) (net.Listener, error) {
	if l == nil || timeout <= 0 {
		return nil, fmt.Errorf("%w: a listener and a positive handshake timeout are required", ErrInvalidConfig)
	}
	return &deadlineListener{Listener: l, timeout: timeout}, nil
}

type deadlineListener struct {
	net.Listener
	timeout time.Duration
}

// Accept returns the next connection with its deadline set. A connection whose deadline
// cannot be set (the peer already went away) is closed and skipped rather than returned as
// an error, which would stop a server's accept loop.
func (l *deadlineListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if err := c.SetDeadline(time.Now().Add(l.timeout)); err != nil {
			c.Close()
			continue
		}
		return c, nil
	}
}
