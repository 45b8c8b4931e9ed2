package security

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/execplane/execplane/internal/dev/devbundle"
)

// The tests of this file are ADVERSARIAL.md "Authentication", one per case, over real TLS 1.3
// handshakes on loopback against ServerTLSConfig. Connection-level cases that need gRPC
// (removal from policy on an open connection, slow handshakes under gRPC) are in
// grpc_test.go.

func TestAuthValidClientAccepted(t *testing.T) {
	a := newAuthFixture(t)
	a.expectAccepted(t, a.clientCert(a.res.Caller))
	a.expectAccepted(t, a.clientCert(a.res.Administrator))
	a.expectAccepted(t, a.clientCert(a.res.Gateway))
}

func TestAuthNoClientCertificate(t *testing.T) {
	a := newAuthFixture(t)
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: a.roots(), ServerName: "localhost"}
	serverErr, clientErr := a.srv.handshake(t, cfg)
	if serverErr == nil || clientErr == nil || ReasonOf(serverErr) != ReasonNoCertificate {
		t.Fatalf("server %v (reason %q), client %v", serverErr, ReasonOf(serverErr), clientErr)
	}
}

func TestAuthUntrustedSelfSigned(t *testing.T) {
	a := newAuthFixture(t)
	key := newKey(t)
	tmpl := clientTemplate(t, a.res.Caller.Identity)
	self := rawCert(t, tmpl, tmpl, key.Public(), key)
	a.expectRefused(t, chainCert(key, self), ErrUntrusted)
}

func TestAuthUntrustedSiblingCA(t *testing.T) {
	a := newAuthFixture(t)
	// Same name as the trusted CA, other key: only the signature tells them apart.
	sibling, err := devbundle.NewCA(a.ca.Certificate.Subject.CommonName, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert := leafCert(t, sibling, devbundle.LeafSpec{
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, URIs: []string{a.res.Caller.Identity},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
	})
	a.expectRefused(t, cert, ErrUntrusted)
	// Presenting the sibling CA as an intermediate does not help either.
	cert.Certificate = append(cert.Certificate, sibling.Certificate.Raw)
	a.expectRefused(t, cert, ErrUntrusted)
}

// TestAuthUntrustedPreviousBundle rotates the client CA (a new bundle is made current) and
// checks that the next handshake verifies against the new CA only: a certificate of the
// previous bundle is refused, one of the new bundle accepted, without any restart.
func TestAuthUntrustedPreviousBundle(t *testing.T) {
	a := newAuthFixture(t)
	previous := a.clientCert(a.res.Caller)
	a.expectAccepted(t, previous)

	next := newFixture(t)
	a.h.set(next.mustLoad())
	roots := a.roots()
	roots.AddCert(next.ca.Certificate) // the client trusts the new server certificate too

	serverErr, _ := a.srv.handshake(t, clientConfig(previous, roots))
	if !errors.Is(serverErr, ErrUntrusted) {
		t.Fatalf("previous bundle's certificate: server %v; want ErrUntrusted", serverErr)
	}
	serverErr, clientErr := a.srv.handshake(t, clientConfig(next.clientCert(next.res.Caller), roots))
	if serverErr != nil || clientErr != nil {
		t.Fatalf("new bundle's certificate: server %v, client %v", serverErr, clientErr)
	}
}

func TestAuthExpiredCertificate(t *testing.T) {
	a := newAuthFixture(t)
	cert := leafCert(t, a.ca, devbundle.LeafSpec{
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, URIs: []string{a.res.Caller.Identity},
		NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: time.Now().Add(-time.Minute),
	})
	a.expectRefused(t, cert, ErrCertificateExpired)
}

func TestAuthNotYetValidCertificate(t *testing.T) {
	a := newAuthFixture(t)
	cert := leafCert(t, a.ca, devbundle.LeafSpec{
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, URIs: []string{a.res.Caller.Identity},
		NotBefore: time.Now().Add(time.Minute), NotAfter: time.Now().Add(time.Hour),
	})
	a.expectRefused(t, cert, ErrCertificateExpired)
}

func TestAuthTLS12OrLowerRefused(t *testing.T) {
	a := newAuthFixture(t)
	for _, v := range []uint16{tls.VersionTLS10, tls.VersionTLS11, tls.VersionTLS12} {
		cfg := clientConfig(a.clientCert(a.res.Caller), a.roots())
		cfg.MinVersion, cfg.MaxVersion = v, v
		serverErr, clientErr := a.srv.handshake(t, cfg)
		if serverErr == nil || clientErr == nil || !strings.Contains(serverErr.Error(), "unsupported versions") {
			t.Fatalf("version %x: server %v, client %v", v, serverErr, clientErr)
		}
	}
}

func TestAuthServerAuthOnlyEKU(t *testing.T) {
	a := newAuthFixture(t)
	for _, usages := range [][]x509.ExtKeyUsage{
		{x509.ExtKeyUsageServerAuth},
		nil, // no extension: crypto/x509 would treat it as any usage
		{x509.ExtKeyUsageAny},
	} {
		cert := leafCert(t, a.ca, devbundle.LeafSpec{
			ExtKeyUsage: usages, URIs: []string{a.res.Caller.Identity},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		})
		a.expectRefused(t, cert, ErrCertificateRejected)
	}
}

func TestAuthCACertificateAsLeaf(t *testing.T) {
	a := newAuthFixture(t)
	t.Run("intermediate CA with a client identity", func(t *testing.T) {
		key := newKey(t)
		tmpl := clientTemplate(t, a.res.Caller.Identity)
		tmpl.IsCA, tmpl.KeyUsage = true, x509.KeyUsageCertSign|x509.KeyUsageDigitalSignature
		ca := rawCert(t, tmpl, a.ca.Certificate, key.Public(), a.ca.Key)
		a.expectRefused(t, chainCert(key, ca), ErrCertificateRejected)
	})
	t.Run("certificate-signing key usage without the CA flag", func(t *testing.T) {
		key := newKey(t)
		tmpl := clientTemplate(t, a.res.Caller.Identity)
		tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
		c := rawCert(t, tmpl, a.ca.Certificate, key.Public(), a.ca.Key)
		a.expectRefused(t, chainCert(key, c), ErrCertificateRejected)
	})
	t.Run("the trusted root itself", func(t *testing.T) {
		a.expectRefused(t, chainCert(a.ca.Key, a.ca.Certificate), ErrCertificateRejected)
	})
}

func TestAuthIdentityNotInPolicy(t *testing.T) {
	a := newAuthFixture(t)
	a.expectRefused(t, a.issueClient("spiffe://execplane.test/client/stranger"), ErrNotInPolicy)
}

// TestAuthPolicyAppliesToNextHandshake adds the refused identity to the policy in a new
// bundle and checks the very next handshake accepts it.
func TestAuthPolicyAppliesToNextHandshake(t *testing.T) {
	a := newAuthFixture(t)
	const stranger = "spiffe://execplane.test/client/stranger"
	cert := a.issueClient(stranger)
	a.expectRefused(t, cert, ErrNotInPolicy)
	a.m.Generation++
	a.m.Clients = append(a.m.Clients, ClientEntry{URI: stranger})
	a.writeManifest()
	a.h.set(a.mustLoad())
	a.expectAccepted(t, cert)
}

func TestAuthZeroURISANs(t *testing.T) {
	a := newAuthFixture(t)
	cert := leafCert(t, a.ca, devbundle.LeafSpec{
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, DNSNames: []string{"caller.execplane.test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
	})
	a.expectRefused(t, cert, ErrNoIdentity)
}

func TestAuthSeveralURISANs(t *testing.T) {
	a := newAuthFixture(t)
	cert := leafCert(t, a.ca, devbundle.LeafSpec{
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		URIs:        []string{a.res.Caller.Identity, a.res.Administrator.Identity},
		NotBefore:   time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
	})
	a.expectRefused(t, cert, ErrAmbiguousIdentity)
}

func TestAuthNonCanonicalURISAN(t *testing.T) {
	a := newAuthFixture(t)
	// Equal to the caller's identity after normalisation, and therefore refused.
	upper := strings.Replace(a.res.Caller.Identity, "execplane.test", "Execplane.test", 1)
	cert := leafCert(t, a.ca, devbundle.LeafSpec{
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, URIs: []string{upper},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
	})
	a.expectRefused(t, cert, ErrNonCanonicalIdentity)
}

// TestAuthSessionTicketsOff offers a session cache and checks that the server issues no
// ticket and no connection resumes: every connection is fully authenticated.
func TestAuthSessionTicketsOff(t *testing.T) {
	a := newAuthFixture(t)
	cache := tls.NewLRUClientSessionCache(4)
	cfg := clientConfig(a.clientCert(a.res.Caller), a.roots())
	cfg.ClientSessionCache = cache
	for range 2 {
		if serverErr, clientErr := a.srv.handshake(t, cfg); serverErr != nil || clientErr != nil {
			t.Fatalf("server %v, client %v", serverErr, clientErr)
		}
	}
	if s, ok := cache.Get("localhost"); ok || s != nil {
		t.Fatal("the server issued a session ticket")
	}
	// Control: the same material with tickets on does fill the cache, so the check above
	// would see a ticket if one were sent.
	b, _ := a.h.current()
	withTickets := b.serverTLS.Clone()
	withTickets.SessionTicketsDisabled = false
	control := startTLSServer(t, withTickets)
	controlCache := tls.NewLRUClientSessionCache(4)
	cfg.ClientSessionCache = controlCache
	if serverErr, clientErr := control.handshake(t, cfg); serverErr != nil || clientErr != nil {
		t.Fatalf("control: server %v, client %v", serverErr, clientErr)
	}
	if _, ok := controlCache.Get("localhost"); !ok {
		t.Fatal("control: no ticket even with tickets on; the check above proves nothing")
	}
	// And a handshake observed from the server side never resumed.
	srvCfg := ServerTLSConfig(a.h.current)
	if !srvCfg.SessionTicketsDisabled || !b.serverTLS.SessionTicketsDisabled {
		t.Fatal("session tickets enabled")
	}
	if _, err := verifyClient(tls.ConnectionState{Version: tls.VersionTLS13, DidResume: true}, a.roots(), nil, time.Now()); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("a resumed connection: %v", err)
	}
}

func TestAuthNoBundleFailsClosed(t *testing.T) {
	a := newAuthFixture(t)
	a.h.set(nil)
	a.expectRefused(t, a.clientCert(a.res.Caller), ErrUnavailable)
	a.h.set(a.mustLoad())
	a.expectAccepted(t, a.clientCert(a.res.Caller))
}

func TestStaticTLSConfig(t *testing.T) {
	f := newFixture(t)
	b := f.mustLoad()
	srv := startTLSServer(t, TLSConfig(b.ServerCertificate(), b.ClientCAs()))
	// No policy: any canonical identity that chains is accepted.
	if serverErr, clientErr := srv.handshake(t, clientConfig(f.issueClient("spiffe://execplane.test/anyone"), f.roots())); serverErr != nil || clientErr != nil {
		t.Fatalf("server %v, client %v", serverErr, clientErr)
	}
	key := newKey(t)
	tmpl := clientTemplate(t, "spiffe://execplane.test/anyone")
	self := rawCert(t, tmpl, tmpl, key.Public(), key)
	if serverErr, _ := srv.handshake(t, clientConfig(chainCert(key, self), f.roots())); !errors.Is(serverErr, ErrUntrusted) {
		t.Fatalf("self-signed: %v", serverErr)
	}
}

func TestLoadClientTLSConfig(t *testing.T) {
	a := newAuthFixture(t)
	cfg, err := LoadClientTLSConfig(ClientFiles{
		CertFile: a.res.Caller.CertFile, KeyFile: a.res.Caller.KeyFile, CAFile: a.res.CACert, ServerName: "localhost",
	})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MinVersion != tls.VersionTLS13 || cfg.ClientSessionCache != nil {
		t.Fatalf("config %+v", cfg)
	}
	if serverErr, clientErr := a.srv.handshake(t, cfg); serverErr != nil || clientErr != nil {
		t.Fatalf("server %v, client %v", serverErr, clientErr)
	}
	_, err = LoadClientTLSConfig(ClientFiles{CertFile: a.res.Caller.CertFile, KeyFile: a.res.Administrator.KeyFile, CAFile: a.res.CACert})
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("mismatched key: %v", err)
	}
	_, err = LoadClientTLSConfig(ClientFiles{CertFile: a.res.CACert, KeyFile: a.res.Caller.CertFile, CAFile: a.res.GrantPublicKey})
	if countJoined(err) != 2 {
		t.Fatalf("two bad files: %v", err)
	}
}
