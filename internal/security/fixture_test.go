package security

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/execplane/execplane/internal/dev/devbundle"
)

// fixture is a development bundle on disk that tests modify: files are rewritten, the
// manifest is edited as a struct and written back, pins recomputed on request.
type fixture struct {
	t   testing.TB
	res *devbundle.Result
	m   *Manifest
	ca  *devbundle.CA
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	return newFixtureWith(t, devbundle.Options{})
}

// newFixtureWith is newFixture with the generator's options.
func newFixtureWith(t testing.TB, opts devbundle.Options) *fixture {
	t.Helper()
	res, err := devbundle.Generate(filepath.Join(t.TempDir(), "bundle"), opts)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(res.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	m, err := ParseManifest(data)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, res: res, m: m, ca: loadCA(t, res.CACert, res.CAKey)}
}

// path is a file of the bundle.
func (f *fixture) path(name string) string { return filepath.Join(f.res.Dir, name) }

// read returns a file of the bundle.
func (f *fixture) read(name string) []byte {
	f.t.Helper()
	data, err := os.ReadFile(f.path(name))
	if err != nil {
		f.t.Fatal(err)
	}
	return data
}

// write replaces a file of the bundle (not the manifest's pins).
func (f *fixture) write(name string, data []byte) {
	f.t.Helper()
	if err := os.WriteFile(f.path(name), data, 0o600); err != nil {
		f.t.Fatal(err)
	}
}

// writeManifest writes f.m as the manifest, as it stands (pins unchanged).
func (f *fixture) writeManifest() {
	f.t.Helper()
	data, err := yaml.Marshal(f.m)
	if err != nil {
		f.t.Fatal(err)
	}
	f.write(devbundle.ManifestFile, data)
}

// repin recomputes every pin from the files on disk and writes the manifest (a renewable
// server certificate and key have none).
func (f *fixture) repin() {
	f.t.Helper()
	f.m.FileDigests = map[string]string{}
	for _, ref := range f.m.files() {
		if ref.pinned {
			f.m.FileDigests[ref.name] = FileDigest(f.read(ref.name))
		}
	}
	f.writeManifest()
}

// load loads the bundle now.
func (f *fixture) load() (*Bundle, error) { return LoadBundle(f.res.Manifest, time.Now()) }

// mustLoad loads the bundle or fails the test.
func (f *fixture) mustLoad() *Bundle {
	f.t.Helper()
	b, err := f.load()
	if err != nil {
		f.t.Fatal(err)
	}
	return b
}

// clientCert loads one of the generated clients' credentials.
func (f *fixture) clientCert(c devbundle.Client) tls.Certificate {
	f.t.Helper()
	cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		f.t.Fatal(err)
	}
	return cert
}

// roots trusts the fixture's CA (which signs the server certificate).
func (f *fixture) roots() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(f.ca.Certificate)
	return pool
}

// issueClient issues a client certificate for identity from the fixture's CA, valid now.
func (f *fixture) issueClient(identity string) tls.Certificate {
	f.t.Helper()
	return leafCert(f.t, f.ca, devbundle.LeafSpec{
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		URIs:        []string{identity},
		NotBefore:   time.Now().Add(-time.Hour),
		NotAfter:    time.Now().Add(time.Hour),
	})
}

// leafCert issues a leaf from ca and returns it with its chain (the leaf only) and key.
func leafCert(t testing.TB, ca *devbundle.CA, spec devbundle.LeafSpec) tls.Certificate {
	t.Helper()
	cert, key, err := ca.Issue(spec)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}
}

func loadCA(t testing.TB, certFile, keyFile string) *devbundle.CA {
	t.Helper()
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	key, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return &devbundle.CA{Certificate: cert, Key: key.(crypto.Signer)}
}

// rawCert signs tmpl (for subject key pub) with parent's key; the escape hatch for
// certificates devbundle would never issue. It fills the serial and validity if unset.
func rawCert(t *testing.T, tmpl, parent *x509.Certificate, pub crypto.PublicKey, parentKey crypto.Signer) *x509.Certificate {
	t.Helper()
	if tmpl.SerialNumber == nil {
		serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 64))
		if err != nil {
			t.Fatal(err)
		}
		tmpl.SerialNumber = serial
	}
	if tmpl.NotBefore.IsZero() {
		tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// caTemplate is an intermediate or root CA template.
func caTemplate(name string) *x509.Certificate {
	return &x509.Certificate{
		Subject:               pkix.Name{CommonName: name},
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
}

// clientTemplate is a client leaf template for the given URI SANs.
func clientTemplate(t *testing.T, uris ...string) *x509.Certificate {
	t.Helper()
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "client"},
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
	}
	for _, u := range uris {
		parsed, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, parsed)
	}
	return tmpl
}

// chainCert assembles a TLS certificate from a chain (leaf first) and the leaf's key.
func chainCert(key crypto.Signer, chain ...*x509.Certificate) tls.Certificate {
	c := tls.Certificate{PrivateKey: key, Leaf: chain[0]}
	for _, x := range chain {
		c.Certificate = append(c.Certificate, x.Raw)
	}
	return c
}

// holder is the "current bundle" a SecurityManager would provide.
type holder struct{ p atomic.Pointer[Bundle] }

func newHolder(b *Bundle) *holder {
	h := &holder{}
	h.p.Store(b)
	return h
}

func (h *holder) current() (*Bundle, bool) {
	b := h.p.Load()
	return b, b != nil
}

func (h *holder) set(b *Bundle) { h.p.Store(b) }
