package security

import (
	"crypto/x509"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/execplane/execplane/internal/dev/devbundle"
	"github.com/execplane/execplane/internal/security/highwater"
)

// leafLifetime is the renewable fixture's server certificate lifetime; cert-manager renews
// at two thirds of it by default.
const leafLifetime = time.Hour

// newRenewableFixture is a development bundle whose server certificate is renewable in
// place, valid for leafLifetime under a CA valid for days.
func newRenewableFixture(t testing.TB) *fixture {
	t.Helper()
	return newFixtureWith(t, devbundle.Options{RenewableServer: true, ServerValidity: leafLifetime})
}

// serverLeafSpec is the fixture's server identity with the given validity.
func (f *fixture) serverLeafSpec(notBefore, notAfter time.Time) devbundle.LeafSpec {
	return devbundle.LeafSpec{
		CommonName:  "execplane server",
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    f.res.ServerDNSNames,
		IPAddresses: f.res.ServerIPAddresses,
		NotBefore:   notBefore,
		NotAfter:    notAfter,
	}
}

// writeServer writes a server certificate chain and key over the bundle's, as cert-manager
// rewrites tls.crt and tls.key (nothing is repinned: they are not pinned).
func (f *fixture) writeServer(certPEM, keyPEM []byte) {
	f.t.Helper()
	f.write(devbundle.ServerCertFile, certPEM)
	f.write(devbundle.ServerKeyFile, keyPEM)
}

// issueServer issues a server certificate from ca for spec and writes it with its new key.
func (f *fixture) issueServer(ca *devbundle.CA, spec devbundle.LeafSpec, chain ...*x509.Certificate) {
	f.t.Helper()
	cert, key, err := ca.Issue(spec)
	if err != nil {
		f.t.Fatal(err)
	}
	keyPEM, err := devbundle.PrivateKeyPEM(key)
	if err != nil {
		f.t.Fatal(err)
	}
	f.writeServer(devbundle.CertificatePEM(append([]*x509.Certificate{cert}, chain...)...), keyPEM)
}

// TestRenewalInPlace is the transition rule of a renewable server certificate: each case
// rewrites the bundle's files after the first load, the way a CA, cert-manager, the kubelet
// or an attacker might, and states whether LoadBundle accepts the result and whether
// CheckTransition lets it follow the first bundle. The high-water mark, recording the first
// bundle, must agree (highwater.Check): a replica that restarts on the result, or a reader
// that waits for the mark, decides as a running replica does.
func TestRenewalInPlace(t *testing.T) {
	type want struct{ load, transition string } // "" accepted, otherwise a substring of the refusal
	tests := []struct {
		name   string
		change func(t *testing.T, f *fixture, current *x509.Certificate, now time.Time)
		want   want
	}{
		{"renewal: same CA, same names, later notBefore, new key", func(t *testing.T, f *fixture, cur *x509.Certificate, now time.Time) {
			certPEM, keyPEM, err := f.res.IssueServer(now, now.Add(leafLifetime))
			if err != nil {
				t.Fatal(err)
			}
			f.writeServer(certPEM, keyPEM)
		}, want{}},
		{"renewal through an intermediate CA the chain file carries", func(t *testing.T, f *fixture, cur *x509.Certificate, now time.Time) {
			key := newKey(t)
			inter := rawCert(t, caTemplate("execplane intermediate"), f.ca.Certificate, key.Public(), f.ca.Key)
			f.issueServer(&devbundle.CA{Certificate: inter, Key: key}, f.serverLeafSpec(cur.NotBefore.Add(time.Minute), now.Add(time.Hour)), inter)
		}, want{}},
		{"the same files again: no change", func(*testing.T, *fixture, *x509.Certificate, time.Time) {}, want{}},
		{"an older certificate (earlier notBefore)", func(t *testing.T, f *fixture, cur *x509.Certificate, now time.Time) {
			f.issueServer(f.ca, f.serverLeafSpec(cur.NotBefore.Add(-time.Minute), now.Add(time.Hour)))
		}, want{transition: "rollback"}},
		{"another certificate with the same notBefore (issued twice in a second)", func(t *testing.T, f *fixture, cur *x509.Certificate, now time.Time) {
			f.issueServer(f.ca, f.serverLeafSpec(cur.NotBefore, cur.NotAfter))
		}, want{transition: "as the current one, so it is neither newer nor older; " +
			"renew the certificate again (a later notBefore), or raise the manifest generation above 1 to accept this one"}},
		{"another certificate with the same notBefore, with a new generation", func(t *testing.T, f *fixture, cur *x509.Certificate, now time.Time) {
			f.m.Generation++
			f.writeManifest()
			f.issueServer(f.ca, f.serverLeafSpec(cur.NotBefore, cur.NotAfter))
		}, want{}},
		{"an older certificate by one second, with a new generation", func(t *testing.T, f *fixture, cur *x509.Certificate, now time.Time) {
			f.m.Generation++
			f.writeManifest()
			f.issueServer(f.ca, f.serverLeafSpec(cur.NotBefore.Add(-time.Second), cur.NotAfter))
		}, want{transition: "rollback"}},
		{"another identity: a name more", func(t *testing.T, f *fixture, cur *x509.Certificate, now time.Time) {
			spec := f.serverLeafSpec(now, now.Add(time.Hour))
			spec.DNSNames = append(spec.DNSNames, "evil.example")
			f.issueServer(f.ca, spec)
		}, want{load: `DNS names are not exactly serverCertificate.renewal's: missing none, not allowed "evil.example"`}},
		{"another identity: a name fewer", func(t *testing.T, f *fixture, cur *x509.Certificate, now time.Time) {
			spec := f.serverLeafSpec(now, now.Add(time.Hour))
			spec.IPAddresses = spec.IPAddresses[:1]
			f.issueServer(f.ca, spec)
		}, want{load: `IP addresses are not exactly serverCertificate.renewal's: missing "::1"`}},
		{"another identity: a URI added", func(t *testing.T, f *fixture, cur *x509.Certificate, now time.Time) {
			spec := f.serverLeafSpec(now, now.Add(time.Hour))
			spec.URIs = []string{"spiffe://execplane.test/server"}
			f.issueServer(f.ca, spec)
		}, want{load: "URIs are not exactly"}},
		{"another CA with the same names", func(t *testing.T, f *fixture, cur *x509.Certificate, now time.Time) {
			other, err := devbundle.NewCA("execplane development CA", now, 24*time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			f.issueServer(other, f.serverLeafSpec(now, now.Add(time.Hour)))
		}, want{load: "does not chain to serverCertificate.renewal.issuerCABundle"}},
		{"another CA, its certificate in the chain file", func(t *testing.T, f *fixture, cur *x509.Certificate, now time.Time) {
			other, err := devbundle.NewCA("other", now, 24*time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			f.issueServer(other, f.serverLeafSpec(now, now.Add(time.Hour)), other.Certificate)
		}, want{load: "does not chain to serverCertificate.renewal.issuerCABundle"}},
		{"expired", func(t *testing.T, f *fixture, cur *x509.Certificate, now time.Time) {
			f.issueServer(f.ca, f.serverLeafSpec(now.Add(-time.Hour), now.Add(-time.Minute)))
		}, want{load: "the leaf is not valid now"}},
		{"not valid yet", func(t *testing.T, f *fixture, cur *x509.Certificate, now time.Time) {
			f.issueServer(f.ca, f.serverLeafSpec(now.Add(time.Minute), now.Add(time.Hour)))
		}, want{load: "the leaf is not valid now"}},
		{"a torn pair: the new certificate, the old key", func(t *testing.T, f *fixture, cur *x509.Certificate, now time.Time) {
			certPEM, _, err := f.res.IssueServer(now, now.Add(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			f.write(devbundle.ServerCertFile, certPEM)
		}, want{load: "serverCertificate.keyFile: does not match the certificate"}},
		{"a client certificate of the same CA as the server's", func(t *testing.T, f *fixture, cur *x509.Certificate, now time.Time) {
			spec := f.serverLeafSpec(now, now.Add(time.Hour))
			spec.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
			f.issueServer(f.ca, spec)
		}, want{load: "lacks the serverAuth extended key usage"}},
		{"an email address among the names", func(t *testing.T, f *fixture, cur *x509.Certificate, now time.Time) {
			tmpl := clientTemplate(t)
			tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
			tmpl.DNSNames, tmpl.IPAddresses, tmpl.EmailAddresses = f.res.ServerDNSNames, f.res.ServerIPAddresses, []string{"ops@example.org"}
			key := newKey(t)
			keyPEM, _ := devbundle.PrivateKeyPEM(key)
			f.writeServer(devbundle.CertificatePEM(rawCert(t, tmpl, f.ca.Certificate, key.Public(), f.ca.Key)), keyPEM)
		}, want{load: "email addresses"}},
		{"a renewal, and the client CA bundle changed at the same generation", func(t *testing.T, f *fixture, cur *x509.Certificate, now time.Time) {
			certPEM, keyPEM, err := f.res.IssueServer(now, now.Add(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			f.writeServer(certPEM, keyPEM)
			other, err := devbundle.NewCA("another client CA", now, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			f.write(devbundle.CACertFile, append(f.read(devbundle.CACertFile), devbundle.CertificatePEM(other.Certificate)...))
			f.repin()
		}, want{transition: "with different content"}},
		{"the client CA bundle changed, unpinned", func(t *testing.T, f *fixture, cur *x509.Certificate, now time.Time) {
			other, err := devbundle.NewCA("another client CA", now, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			f.write(devbundle.CACertFile, append(f.read(devbundle.CACertFile), devbundle.CertificatePEM(other.Certificate)...))
		}, want{load: "clientCABundle: content does not match its pin"}},
		{"the policy changed at the same generation", func(t *testing.T, f *fixture, cur *x509.Certificate, now time.Time) {
			f.m.Clients = f.m.Clients[:1]
			f.writeManifest()
		}, want{transition: "with different content"}},
		{"the issuers renewed (a CA Certificate renewed) at the same generation", func(t *testing.T, f *fixture, cur *x509.Certificate, now time.Time) {
			renewedCA, err := devbundle.NewCA("execplane development CA", now, 48*time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			f.write(devbundle.ServerIssuerFile, devbundle.CertificatePEM(f.ca.Certificate, renewedCA.Certificate))
			f.repin()
			f.issueServer(renewedCA, f.serverLeafSpec(now, now.Add(time.Hour)))
		}, want{transition: "with different content"}},
		{"the issuers renewed, with a new generation", func(t *testing.T, f *fixture, cur *x509.Certificate, now time.Time) {
			renewedCA, err := devbundle.NewCA("execplane development CA", now, 48*time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			f.write(devbundle.ServerIssuerFile, devbundle.CertificatePEM(f.ca.Certificate, renewedCA.Certificate))
			f.m.Generation++
			f.repin()
			f.issueServer(renewedCA, f.serverLeafSpec(now, now.Add(time.Hour)))
		}, want{}},
		{"a new generation does not readmit an older certificate", func(t *testing.T, f *fixture, cur *x509.Certificate, now time.Time) {
			f.m.Generation++
			f.writeManifest()
			f.issueServer(f.ca, f.serverLeafSpec(cur.NotBefore.Add(-time.Minute), now.Add(time.Hour)))
		}, want{transition: "rollback"}},
		{"a renewal with a new generation", func(t *testing.T, f *fixture, cur *x509.Certificate, now time.Time) {
			f.m.Generation++
			f.writeManifest()
			f.issueServer(f.ca, f.serverLeafSpec(cur.NotBefore.Add(time.Second), now.Add(time.Hour)))
		}, want{}},
		{"a new generation that pins an older certificate (renewal dropped)", func(t *testing.T, f *fixture, cur *x509.Certificate, now time.Time) {
			f.m.Generation++
			f.m.ServerCertificate.Renewal = nil
			f.issueServer(f.ca, f.serverLeafSpec(cur.NotBefore.Add(-time.Minute), now.Add(time.Hour)))
			f.repin()
		}, want{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newRenewableFixture(t)
			first := f.mustLoad()
			now := time.Now()
			tt.change(t, f, first.ServerCertificate().Leaf, now)
			next, err := LoadBundle(f.res.Manifest, now)
			if tt.want.load != "" {
				if !errors.Is(err, ErrInvalidBundle) || !strings.Contains(err.Error(), tt.want.load) {
					t.Fatalf("LoadBundle = %v; want a refusal containing %q", err, tt.want.load)
				}
				return
			}
			if err != nil {
				t.Fatalf("LoadBundle: %v", err)
			}
			err = CheckTransition(first, next, now)
			mark := offerOf(first)
			_, markErr := highwater.Check(highwater.Mark{Generation: mark.Generation, Digest: mark.Digest, Keys: mark.Keys, Leaf: mark.Leaf}, offerOf(next), now)
			if (err == nil) != (markErr == nil) {
				t.Errorf("CheckTransition = %v, but the mark recording the first bundle says %v", err, markErr)
			}
			if tt.want.transition == "" {
				if err != nil {
					t.Fatalf("CheckTransition: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrUnsafeTransition) || !strings.Contains(err.Error(), tt.want.transition) {
				t.Fatalf("CheckTransition = %v; want a refusal containing %q", err, tt.want.transition)
			}
		})
	}
}

// A renewable leaf counts only once its notBefore has passed on the loading replica's clock
// (injected here): there is no allowance for an issuer whose clock runs ahead — validAt
// requires notBefore <= now, and the chain to the issuers is verified at now. Such a
// certificate is refused as not valid yet until the clock reaches its notBefore, when the
// manager judges it again (TestManagerRetriesRefusedMaterial); so the notBefore the mark
// records is never ahead of the clock of the writer that recorded it (which the mark checks
// too: highwater.TestAcceptRefusesACertificateNotValidYet).
func TestRenewableLeafNotBeforeHasNoAllowance(t *testing.T) {
	f := newRenewableFixture(t)
	now := f.mustLoad().ServerCertificate().Leaf.NotBefore.Add(10 * time.Minute) // whole seconds, as a notBefore
	tests := []struct {
		name  string
		ahead time.Duration // the leaf's notBefore, after now
		want  string        // "" accepted, otherwise a substring of the refusal
	}{
		{"a day ahead", 24 * time.Hour, "serverCertificate.certFile: the leaf is not valid now"},
		{"one second ahead", time.Second, "serverCertificate.certFile: the leaf is not valid now"},
		{"now", 0, ""},
		{"a second ago", -time.Second, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			notBefore := now.Add(tt.ahead)
			f.issueServer(f.ca, f.serverLeafSpec(notBefore, notBefore.Add(time.Hour)))
			b, err := LoadBundle(f.res.Manifest, now)
			if tt.want != "" {
				if !errors.Is(err, ErrInvalidBundle) || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("LoadBundle = %v; want a refusal containing %q", err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatalf("LoadBundle: %v", err)
			}
			// Once loaded, it is not valid a second before its notBefore either.
			if err := b.ValidAt(notBefore.Add(-time.Second)); !errors.Is(err, ErrInvalidBundle) || !strings.Contains(err.Error(), "the server certificate is not valid now") {
				t.Fatalf("ValidAt a second before the notBefore = %v", err)
			}
		})
	}
}

// The digest the high-water mark records leaves out a renewable certificate and key, and
// identifies the certificate apart (ServerLeaf); the material a replica compares still
// covers them.
func TestRenewableBundleDigest(t *testing.T) {
	f := newRenewableFixture(t)
	b1 := f.mustLoad()
	leaf1, ok := b1.ServerLeaf()
	if !ok || !leaf1.NotBefore.Equal(b1.ServerCertificate().Leaf.NotBefore) || leaf1.Digest != FileDigest(b1.ServerCertificate().Leaf.Raw) {
		t.Fatalf("ServerLeaf = %+v, %v", leaf1, ok)
	}
	// The documented construction over the manifest and the pinned files only.
	pinned := map[string][]byte{}
	for _, name := range []string{devbundle.CACertFile, devbundle.GrantKeyFile, devbundle.GrantPublicFile, devbundle.RecordKeyFile, devbundle.ServerIssuerFile} {
		pinned[name] = f.read(name)
	}
	if want := bundleDigest(f.read(devbundle.ManifestFile), pinned); b1.Digest() != want {
		t.Fatalf("digest %s, want %s", b1.Digest(), want)
	}
	certPEM, keyPEM, err := f.res.IssueServer(leaf1.NotBefore.Add(time.Second), leaf1.NotBefore.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	f.writeServer(certPEM, keyPEM)
	b2 := f.mustLoad()
	leaf2, _ := b2.ServerLeaf()
	if b2.Digest() != b1.Digest() || leaf2.Digest == leaf1.Digest || b1.sameMaterial(b2) {
		t.Fatalf("after a renewal: digest %s → %s, leaf %s → %s", b1.Digest(), b2.Digest(), leaf1.Digest, leaf2.Digest)
	}
	if _, ok := newFixture(t).mustLoad().ServerLeaf(); ok {
		t.Fatal("a pinned server certificate reported as renewable")
	}
}

// A renewable certificate is only as valid as its chain to the pinned issuers: when the
// issuing CA runs out before the leaf, the bundle stops being valid with it.
func TestRenewableBundleValidityFollowsTheChain(t *testing.T) {
	f := newRenewableFixture(t)
	now := time.Now()
	short, err := devbundle.NewCA("short-lived CA", now, 30*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	f.write(devbundle.ServerIssuerFile, devbundle.CertificatePEM(short.Certificate))
	f.repin()
	f.issueServer(short, f.serverLeafSpec(now.Add(-time.Minute), now.Add(2*time.Hour)))
	b := f.mustLoad()
	if got := b.ExpiresAt(); !got.Equal(short.Certificate.NotAfter) {
		t.Fatalf("ExpiresAt = %v, want the issuer's end %v", got, short.Certificate.NotAfter)
	}
	if err := b.ValidAt(now.Add(20 * time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := b.ValidAt(now.Add(time.Hour)); !errors.Is(err, ErrInvalidBundle) || !strings.Contains(err.Error(), "chain to its issuers") {
		t.Fatalf("ValidAt after the issuer's end = %v", err)
	}
}

// validRenewableManifest is validManifest with a renewable server certificate: its issuers
// pinned, the certificate and key not.
var validRenewableManifest = strings.Replace(strings.Replace(validManifest,
	"serverCertificate: {certFile: server.crt, keyFile: server.key}\n",
	"serverCertificate:\n  certFile: server.crt\n  keyFile: server.key\n  renewal:\n"+
		"    issuerCABundle: server-ca.crt\n"+
		"    dnsNames: [gateway.execplane.svc, \"*.gateway.execplane.svc\"]\n"+
		"    ipAddresses: [\"10.0.0.7\", \"fd00::7\"]\n"+
		"    uris: [\"spiffe://example.org/ns/execplane/sa/gateway\"]\n", 1),
	"  server.crt: "+pin+"\n  server.key: "+pin+"\n", "  server-ca.crt: "+pin+"\n", 1)

func TestParseManifestRenewal(t *testing.T) {
	renewable := validRenewableManifest
	m, err := ParseManifest([]byte(renewable))
	if err != nil {
		t.Fatal(err)
	}
	if r := m.ServerCertificate.Renewal; r == nil || r.IssuerCABundle != "server-ca.crt" || len(r.DNSNames) != 2 || len(r.IPAddresses) != 2 || len(r.URIs) != 1 {
		t.Fatalf("renewal = %+v", m.ServerCertificate.Renewal)
	}
	edit := func(old, new string) string {
		if !strings.Contains(renewable, old) {
			t.Fatalf("test bug: %q not in the manifest", old)
		}
		return strings.Replace(renewable, old, new, 1)
	}
	tests := []struct{ name, doc, want string }{
		{"renewable certificate pinned", edit("fileDigests:\n", "fileDigests:\n  server.crt: "+pin+"\n"),
			`fileDigests: pins "server.crt" (serverCertificate.certFile), which is renewable`},
		{"renewable key pinned", edit("fileDigests:\n", "fileDigests:\n  server.key: "+pin+"\n"), `pins "server.key"`},
		{"issuers not pinned", edit("  server-ca.crt: "+pin+"\n", ""), `has no digest for "server-ca.crt"`},
		{"no issuers", edit("    issuerCABundle: server-ca.crt\n", ""), "serverCertificate.renewal.issuerCABundle: is required"},
		{"issuers are the client CA file", edit("issuerCABundle: server-ca.crt", "issuerCABundle: client-ca.crt"), "names the same file as"},
		{"issuers outside", edit("issuerCABundle: server-ca.crt", "issuerCABundle: ../ca.crt"), "serverCertificate.renewal.issuerCABundle: must be a clean path"},
		{"no DNS name or IP", edit("    dnsNames: [gateway.execplane.svc, \"*.gateway.execplane.svc\"]\n    ipAddresses: [\"10.0.0.7\", \"fd00::7\"]\n", ""), "needs a DNS name or an IP address"},
		{"uppercase DNS name", edit("[gateway.execplane.svc,", "[Gateway.execplane.svc,"), "dnsNames[0]: must be a lowercase DNS name"},
		{"wildcard inside", edit(`"*.gateway.execplane.svc"`, `"gateway.*.svc"`), "dnsNames[1]: must be a lowercase DNS name"},
		{"empty label", edit("[gateway.execplane.svc,", "[gateway..svc,"), "dnsNames[0]"},
		{"trailing dot", edit("[gateway.execplane.svc,", "[gateway.execplane.svc.,"), "dnsNames[0]"},
		{"duplicate DNS name", edit(`"*.gateway.execplane.svc"`, "gateway.execplane.svc"), "dnsNames[1]: duplicate of serverCertificate.renewal.dnsNames[0]"},
		{"non-canonical IP", edit(`"fd00::7"`, `"fd00:0::7"`), "ipAddresses[1]: must be an IP address in canonical form"},
		{"not an IP", edit(`"10.0.0.7"`, `"gateway"`), "ipAddresses[0]"},
		{"relative URI", edit(`"spiffe://example.org/ns/execplane/sa/gateway"`, `"gateway"`), "uris[0]: must be an absolute URI"},
		{"unknown renewal field", edit("    issuerCABundle:", "    rotationPolicy: Always\n    issuerCABundle:"), `unknown field "serverCertificate.renewal.rotationPolicy"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseManifest([]byte(tt.doc))
			if !errors.Is(err, ErrInvalidBundle) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("ParseManifest error = %v; want ErrInvalidBundle containing %q", err, tt.want)
			}
		})
	}
	many := make([]string, MaxServerNames+1)
	for i := range many {
		many[i] = "n" + strings.Repeat("x", i%50) + ".example"
	}
	r := &ServerCertificateRenewal{IssuerCABundle: "ca.crt", DNSNames: many}
	if _, err := ParseManifest([]byte(strings.Replace(validManifest, "serverCertificate: {certFile: server.crt, keyFile: server.key}",
		"serverCertificate: {certFile: server.crt, keyFile: server.key, renewal: {issuerCABundle: ca.crt, dnsNames: ["+strings.Join(r.DNSNames, ", ")+"]}}", 1))); err == nil ||
		!strings.Contains(err.Error(), "at most 100") {
		t.Fatalf("too many names: %v", err)
	}
}

// The development bundle's renewable form loads, and its issued certificates are the same
// identity from the same CA.
func TestDevBundleRenewableServer(t *testing.T) {
	f := newFixtureWith(t, devbundle.Options{RenewableServer: true, DNSNames: []string{"gateway.execplane.svc"}})
	b := f.mustLoad()
	if f.m.ServerCertificate.Renewal == nil || f.m.FileDigests[devbundle.ServerCertFile] != "" {
		t.Fatalf("manifest %+v", f.m.ServerCertificate)
	}
	leaf := b.ServerCertificate().Leaf
	if err := leaf.VerifyHostname("gateway.execplane.svc"); err != nil {
		t.Fatal(err)
	}
	if filepath.Base(f.res.ServerIssuer) != devbundle.ServerIssuerFile {
		t.Fatalf("issuer file %q", f.res.ServerIssuer)
	}
}
