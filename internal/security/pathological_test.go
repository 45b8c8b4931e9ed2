package security

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"fmt"
	"math/big"
	"testing"
	"time"
)

// pathologicalBound is how long a handshake with a pathological chain may take, end to end,
// under -race on a loaded 2-core machine. The refusals below happen before any chain is
// built and take about a millisecond; the bound is generous so only unbounded work fails it.
const pathologicalBound = 2 * time.Second

// chainOf builds a valid chain under the fixture's CA: depth intermediates, then a leaf for
// the caller. It returns the TLS certificate presenting leaf and every intermediate.
func (a *authFixture) chainOf(t *testing.T, depth int) ([]*x509.Certificate, *x509.Certificate) {
	t.Helper()
	parent, parentKey := a.ca.Certificate, a.ca.Key
	var intermediates []*x509.Certificate
	for i := range depth {
		key := newKey(t)
		c := rawCert(t, caTemplate(fmt.Sprintf("intermediate %d", i)), parent, key.Public(), parentKey)
		intermediates = append([]*x509.Certificate{c}, intermediates...)
		parent, parentKey = c, key
	}
	leafKey := newKey(t)
	leaf := rawCert(t, clientTemplate(t, a.res.Caller.Identity), parent, leafKey.Public(), parentKey)
	a.leafKey = leafKey
	return intermediates, leaf
}

func TestAuthPathologicalManyIntermediates(t *testing.T) {
	a := newAuthFixture(t)
	t.Run("at the bound, valid", func(t *testing.T) {
		intermediates, leaf := a.chainOf(t, MaxPeerCertificates-1)
		a.expectAccepted(t, chainCert(a.leafKey, append([]*x509.Certificate{leaf}, intermediates...)...))
	})
	t.Run("fifty intermediates, valid", func(t *testing.T) {
		// Every certificate is genuine, so a refusal can only come from the count bound, which
		// is checked before chain building.
		intermediates, leaf := a.chainOf(t, 50)
		start := time.Now()
		a.expectRefused(t, chainCert(a.leafKey, append([]*x509.Certificate{leaf}, intermediates...)...), ErrCertificateRejected)
		if d := time.Since(start); d > pathologicalBound {
			t.Fatalf("refusal took %s", d)
		}
	})
}

// fakeRSAKey is an RSA public key of the given size whose private half nobody has: enough
// for a certificate that only has to be parsed and refused.
func fakeRSAKey(t *testing.T, bits int) *rsa.PublicKey {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), uint(bits)))
	if err != nil {
		t.Fatal(err)
	}
	n.SetBit(n, bits-1, 1).SetBit(n, 0, 1) // exactly bits long, odd
	return &rsa.PublicKey{N: n, E: 65537}
}

func TestAuthPathologicalHugeRSAKey(t *testing.T) {
	a := newAuthFixture(t)
	for _, bits := range []int{MaxRSAKeyBits + 8, 8192, 16384} {
		t.Run(fmt.Sprintf("intermediate of %d bits", bits), func(t *testing.T) {
			huge := rawCert(t, caTemplate("huge"), a.ca.Certificate, fakeRSAKey(t, bits), a.ca.Key)
			leaf := a.issueClient(a.res.Caller.Identity)
			leaf.Certificate = append(leaf.Certificate, huge.Raw)
			start := time.Now()
			// Up to 8192 bits this package's bound refuses; above, crypto/tls refuses first.
			var want error
			if bits <= 8192 {
				want = ErrCertificateRejected
			}
			a.expectRefused(t, leaf, want)
			if d := time.Since(start); d > pathologicalBound {
				t.Fatalf("refusal took %s", d)
			}
		})
	}
	t.Run("small RSA key", func(t *testing.T) {
		small := rawCert(t, caTemplate("small"), a.ca.Certificate, fakeRSAKey(t, 1024), a.ca.Key)
		leaf := a.issueClient(a.res.Caller.Identity)
		leaf.Certificate = append(leaf.Certificate, small.Raw)
		a.expectRefused(t, leaf, ErrCertificateRejected)
	})
}

func TestAuthPathologicalOversizedCertificate(t *testing.T) {
	a := newAuthFixture(t)
	key := newKey(t)
	tmpl := clientTemplate(t, a.res.Caller.Identity)
	tmpl.DNSNames = make([]string, 64)
	for i := range tmpl.DNSNames {
		tmpl.DNSNames[i] = fmt.Sprintf("%0200d.example.org", i)[:200] + ".example.org"
	}
	oversized := rawCert(t, tmpl, a.ca.Certificate, key.Public(), a.ca.Key)
	if len(oversized.Raw) <= MaxPeerCertificateBytes {
		t.Fatalf("test bug: certificate of %d bytes", len(oversized.Raw))
	}
	a.expectRefused(t, chainCert(key, oversized), ErrCertificateRejected)
}
