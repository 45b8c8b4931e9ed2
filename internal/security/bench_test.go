package security

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// BenchmarkTLSHandshake measures full TLS 1.3 handshakes with client certificates over
// loopback against ServerTLSConfig (ECDSA P-256 certificates, as devbundle makes them): a
// dial, the handshake with verifyClient, one 3-byte read, close. Client and server run in
// this process, so the figure is the cost of both sides.
func BenchmarkTLSHandshake(b *testing.B) {
	f := newFixture(b)
	h := newHolder(f.mustLoad())
	benchHandshakes(b, ServerTLSConfig(h.current), clientConfig(f.clientCert(f.res.Caller), f.roots()))
}

// BenchmarkTLSHandshakeStdlib is the same handshake verified by crypto/tls alone
// (RequireAndVerifyClientCert, no policy, no bounds), for comparison.
func BenchmarkTLSHandshakeStdlib(b *testing.B) {
	f := newFixture(b)
	bundle := f.mustLoad()
	cfg := &tls.Config{
		MinVersion:             tls.VersionTLS13,
		Certificates:           []tls.Certificate{bundle.ServerCertificate()},
		ClientAuth:             tls.RequireAndVerifyClientCert,
		ClientCAs:              bundle.ClientCAs(),
		SessionTicketsDisabled: true,
	}
	benchHandshakes(b, cfg, clientConfig(f.clientCert(f.res.Caller), f.roots()))
}

func benchHandshakes(b *testing.B, server, client *tls.Config) {
	srv := startTLSServer(b, server)
	b.ResetTimer()
	for b.Loop() {
		if err := dialAndRead(srv.addr, client); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "handshakes/s")
}

// BenchmarkVerifyClient is verifyClient alone: the bounded checks, the identity, the chain
// and the policy, for a devbundle client certificate.
func BenchmarkVerifyClient(b *testing.B) {
	f := newFixture(b)
	bundle := f.mustLoad()
	cs := tls.ConnectionState{Version: tls.VersionTLS13, PeerCertificates: []*x509.Certificate{f.clientCert(f.res.Caller).Leaf}}
	pool := bundle.ClientCAs()
	for b.Loop() {
		if _, err := verifyClient(cs, pool, bundle.Policies(), time.Now()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLimiterUnary is the limiter's overhead per unary RPC: PeerAuthenticator (peer
// lookup, AuthInfo, validity, policy lookup) plus both reservations and the release, around
// an empty handler.
func BenchmarkLimiterUnary(b *testing.B) {
	f := newFixture(b)
	bundle := f.mustLoad()
	h := newHolder(bundle)
	auth, _ := NewPeerAuthenticator(h.current)
	l, _ := NewRPCLimiter(auth, 1000, 100)
	cert := f.clientCert(f.res.Caller)
	info := AuthInfo{Identity: ClientIdentity(f.res.Caller.Identity)}
	info.State.PeerCertificates = []*x509.Certificate{cert.Leaf}
	ctx := peer.NewContext(context.Background(), &peer.Peer{AuthInfo: info})
	interceptor := l.UnaryInterceptor(translate)
	handler := func(context.Context, any) (any, error) { return nil, nil }
	b.Run("serial", func(b *testing.B) {
		for b.Loop() {
			if _, err := interceptor(ctx, nil, &grpc.UnaryServerInfo{}, handler); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := interceptor(ctx, nil, &grpc.UnaryServerInfo{}, handler); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("refused unauthenticated", func(b *testing.B) {
		bare := peer.NewContext(context.Background(), &peer.Peer{AuthInfo: credentials.TLSInfo{}})
		for b.Loop() {
			if _, err := interceptor(bare, nil, &grpc.UnaryServerInfo{}, handler); err == nil {
				b.Fatal("admitted")
			}
		}
	})
}
