package security

import (
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/execplane/execplane/pkg/apierror"
)

// handshakeTimeout bounds every test handshake so a broken case fails instead of hanging.
const handshakeTimeout = 5 * time.Second

// tlsServer is a raw TLS server on loopback: each connection does one handshake, writes
// "ok\n" if it succeeded and closes. The server's handshake results are reported in order.
type tlsServer struct {
	addr    string
	results chan error
}

func startTLSServer(t testing.TB, cfg *tls.Config) *tlsServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &tlsServer{addr: ln.Addr().String(), results: make(chan error, 16)}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { s.serve(c, cfg) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	return s
}

func (s *tlsServer) serve(c net.Conn, cfg *tls.Config) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(handshakeTimeout))
	conn := tls.Server(c, cfg)
	err := conn.Handshake()
	if err == nil {
		_, err = conn.Write([]byte("ok\n"))
	}
	// Benchmarks never collect results; a full channel must not block the server.
	select {
	case s.results <- err:
	default:
	}
}

// handshake connects with cfg and reports the server's handshake error and the client's
// (a TLS 1.3 client finishes its handshake before the server has judged its certificate,
// so the client's verdict is whether it then reads the server's "ok").
func (s *tlsServer) handshake(t *testing.T, cfg *tls.Config) (serverErr, clientErr error) {
	t.Helper()
	clientErr = dialAndRead(s.addr, cfg)
	select {
	case serverErr = <-s.results:
	case <-time.After(handshakeTimeout):
		t.Fatal("the server reported no handshake result")
	}
	return serverErr, clientErr
}

func dialAndRead(addr string, cfg *tls.Config) error {
	d := &net.Dialer{Timeout: handshakeTimeout}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(handshakeTimeout))
	conn := tls.Client(c, cfg)
	if err := conn.Handshake(); err != nil {
		return err
	}
	buf := make([]byte, 3)
	if _, err := io.ReadFull(conn, buf); err != nil {
		return err
	}
	if string(buf) != "ok\n" {
		return errors.New("unexpected answer")
	}
	return nil
}

// clientConfig presents cert whatever the server asks for (a Go client would otherwise
// withhold a certificate not issued by a CA the server names, and the server would never
// judge it), trusts roots for the server, and offers TLS 1.3.
func clientConfig(cert tls.Certificate, roots *x509.CertPool) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		RootCAs:    roots,
		ServerName: "localhost",
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return &cert, nil
		},
	}
}

// authFixture is a loaded development bundle behind a raw TLS server using ServerTLSConfig.
type authFixture struct {
	*fixture
	h   *holder
	srv *tlsServer
	// leafKey is the key of the last leaf chainOf issued.
	leafKey crypto.Signer
}

func newAuthFixture(t *testing.T) *authFixture {
	t.Helper()
	f := newFixture(t)
	h := newHolder(f.mustLoad())
	return &authFixture{fixture: f, h: h, srv: startTLSServer(t, ServerTLSConfig(h.current))}
}

// expectRefused performs a handshake with cert and requires the server to refuse it with
// an error matching want (nil: any error) and the client to fail too.
func (a *authFixture) expectRefused(t *testing.T, cert tls.Certificate, want error) {
	t.Helper()
	serverErr, clientErr := a.srv.handshake(t, clientConfig(cert, a.roots()))
	if serverErr == nil || clientErr == nil {
		t.Fatalf("handshake accepted (server %v, client %v)", serverErr, clientErr)
	}
	if want != nil && !errors.Is(serverErr, want) {
		t.Fatalf("server error = %v; want %v", serverErr, want)
	}
}

// expectAccepted performs a handshake with cert and requires success on both sides.
func (a *authFixture) expectAccepted(t *testing.T, cert tls.Certificate) {
	t.Helper()
	serverErr, clientErr := a.srv.handshake(t, clientConfig(cert, a.roots()))
	if serverErr != nil || clientErr != nil {
		t.Fatalf("handshake refused (server %v, client %v)", serverErr, clientErr)
	}
}

// translate answers the limiter's refusals as execplane's edges do.
func translate(err error) error { return apierror.Status(err, "") }
