package devbundle_test

import (
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/pem"
	"go/parser"
	"go/token"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/execplane/execplane/internal/dev/devbundle"
	"github.com/execplane/execplane/internal/security"
)

func TestGenerateLoads(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "bundle")
	r, err := devbundle.Generate(dir, devbundle.Options{
		DNSNames:    []string{"gateway.execplane.svc"},
		IPAddresses: []net.IP{net.IPv4(10, 0, 0, 7)},
		Generation:  4,
	})
	if err != nil {
		t.Fatal(err)
	}
	b, err := security.LoadBundle(r.Manifest, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if b.Generation() != 4 || r.Generation != 4 {
		t.Fatalf("generation %d / %d", b.Generation(), r.Generation)
	}
	leaf := b.ServerCertificate().Leaf
	if err := leaf.VerifyHostname("gateway.execplane.svc"); err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"localhost", "127.0.0.1", "::1", "10.0.0.7"} {
		if err := leaf.VerifyHostname(host); err != nil {
			t.Errorf("server certificate: %v", err)
		}
	}
	for _, c := range []devbundle.Client{r.Caller, r.Administrator, r.Gateway} {
		cert := readCert(t, c.CertFile)
		id, err := security.IdentityFromCertificate(cert)
		if err != nil || string(id) != c.Identity || !b.Policies().Contains(id) {
			t.Errorf("client %s: identity %q, %v", c.Identity, id, err)
		}
		if _, err := cert.Verify(x509.VerifyOptions{Roots: b.ClientCAs(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("client %s: %v", c.Identity, err)
		}
	}
	caller, _ := b.Policies().Lookup(security.ClientIdentity(r.Caller.Identity))
	admin, _ := b.Policies().Lookup(security.ClientIdentity(r.Administrator.Identity))
	if !caller.CanAttestOwner() || !admin.AdministersClient(security.ClientIdentity(r.Caller.Identity)) {
		t.Fatalf("caller %+v admin %+v", caller, admin)
	}
}

func TestGenerateFileModes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "bundle")
	r, err := devbundle.Generate(dir, devbundle.Options{})
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{r.CAKey, r.ServerKey, r.GrantPrivateKey, r.Caller.KeyFile, r.Administrator.KeyFile, r.Gateway.KeyFile}
	for _, k := range keys {
		fi, err := os.Stat(k)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v", k, fi.Mode().Perm())
		}
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("directory mode: %v %v", fi.Mode().Perm(), err)
	}
}

func TestGenerateRefusesToOverwrite(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "something"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := devbundle.Generate(dir, devbundle.Options{}); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("Generate into a non-empty directory: %v", err)
	}
	if _, err := devbundle.Generate("", devbundle.Options{}); err == nil {
		t.Fatal("Generate without a directory succeeded")
	}
}

func TestGenerateOptions(t *testing.T) {
	for _, opts := range []devbundle.Options{
		{TrustDomain: "Example.org"},
		{TrustDomain: "example..org"},
		{Validity: -time.Hour},
		{Validity: devbundle.MaxValidity + time.Hour},
	} {
		if _, err := devbundle.Generate(filepath.Join(t.TempDir(), "b"), opts); err == nil {
			t.Errorf("Generate(%+v) succeeded", opts)
		}
	}
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	r, err := devbundle.Generate(filepath.Join(t.TempDir(), "b"), devbundle.Options{TrustDomain: "corp.example", Now: now, Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if r.Caller.Identity != "spiffe://corp.example/client/caller" {
		t.Fatalf("caller identity %q", r.Caller.Identity)
	}
	if _, err := security.LoadBundle(r.Manifest, now); err != nil {
		t.Fatalf("load at generation time: %v", err)
	}
	if _, err := security.LoadBundle(r.Manifest, now.Add(2*time.Hour)); err == nil {
		t.Fatal("loaded after the validity")
	}
}

// TestImportsStandardLibraryOnly keeps the generator free of dependencies (doc.go).
func TestImportsStandardLibraryOnly(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if first, _, _ := strings.Cut(path, "/"); strings.Contains(first, ".") {
				t.Errorf("%s imports %s", name, path)
			}
		}
	}
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// A renewable bundle names its issuer and the server's names instead of pinning the server
// certificate, and IssueServer issues what cert-manager writes on a renewal: the same CA
// and names, the validity asked for, a new key every time. Written over the bundle's files,
// a newer one loads at the same generation.
func TestGenerateRenewableServer(t *testing.T) {
	now := time.Now()
	dir := filepath.Join(t.TempDir(), "bundle")
	r, err := devbundle.Generate(dir, devbundle.Options{RenewableServer: true, ServerValidity: time.Hour, Now: now,
		DNSNames: []string{"Gateway.execplane.svc"}, IPAddresses: []net.IP{net.ParseIP("10.0.0.7")}})
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := os.ReadFile(r.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"renewal:", `issuerCABundle: "server-issuer.crt"`, `"gateway.execplane.svc"`, `"10.0.0.7"`, `"::1"`} {
		if !strings.Contains(string(manifest), want) {
			t.Errorf("manifest lacks %s:\n%s", want, manifest)
		}
	}
	if strings.Contains(string(manifest), `"server.crt": "sha256:`) || strings.Contains(string(manifest), `"server.key": "sha256:`) {
		t.Errorf("a renewable certificate is pinned:\n%s", manifest)
	}
	first, err := security.LoadBundle(r.Manifest, now)
	if err != nil {
		t.Fatal(err)
	}
	leaf := first.ServerCertificate().Leaf
	if got := leaf.NotAfter.Sub(leaf.NotBefore); got != time.Hour+5*time.Minute {
		t.Fatalf("server validity %s", got)
	}
	if ca := readCert(t, r.CACert); !ca.NotAfter.After(now.Add(6 * 24 * time.Hour)) {
		t.Fatalf("the CA lasts until %v", ca.NotAfter)
	}

	later := now.Add(40 * time.Minute)
	certPEM, keyPEM, err := r.IssueServer(later, later.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	again, keyAgain, err := r.IssueServer(later, later.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if string(keyPEM) == string(keyAgain) || string(certPEM) == string(again) {
		t.Fatal("two renewals share a key or a certificate")
	}
	if err := os.WriteFile(r.ServerCert, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(r.ServerKey, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	renewed, err := security.LoadBundle(r.Manifest, later)
	if err != nil {
		t.Fatal(err)
	}
	if err := security.CheckTransition(first, renewed, later); err != nil || renewed.Generation() != first.Generation() {
		t.Fatalf("a renewal at generation %d: %v", renewed.Generation(), err)
	}
	if _, _, err := r.IssueServer(later, later); err == nil {
		t.Fatal("an empty validity was issued")
	}
	if _, err := devbundle.Generate(filepath.Join(t.TempDir(), "b"), devbundle.Options{Validity: time.Hour, ServerValidity: 2 * time.Hour}); err == nil {
		t.Fatal("a server certificate outliving its CA was generated")
	}
	if _, err := devbundle.LoadCA(r.ServerCert, r.ServerKey); err == nil {
		t.Fatal("LoadCA accepted a leaf")
	}
}

// A bundle signed by a CA of the operator's (cert-manager's, whose Secret holds its key as
// SEC 1 "EC PRIVATE KEY"), renewable for exactly the names given: the server certificate and
// the manifest's renewal name those and nothing more, and everything chains to that CA.
func TestGenerateWithTheOperatorsCA(t *testing.T) {
	now := time.Now()
	own, err := devbundle.NewCA("operator CA", now, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalECPrivateKey(own.Key.(*ecdsa.PrivateKey))
	if err != nil {
		t.Fatal(err)
	}
	ca, err := devbundle.ParseCA(devbundle.CertificatePEM(own.Certificate), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}))
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"gateway.execplane.svc", "controller.execplane.svc"}
	r, err := devbundle.Generate(filepath.Join(t.TempDir(), "bundle"), devbundle.Options{CA: ca, DNSNames: names, ExactServerNames: true,
		RenewableServer: true, Now: now, Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	leaf := readCert(t, r.ServerCert)
	if !slices.Equal(leaf.DNSNames, names) || len(leaf.IPAddresses) != 0 {
		t.Fatalf("server names %v %v, want exactly %v", leaf.DNSNames, leaf.IPAddresses, names)
	}
	if !readCert(t, r.CACert).Equal(own.Certificate) || !readCert(t, r.ServerIssuer).Equal(own.Certificate) {
		t.Fatal("the bundle's CA is not the one given")
	}
	b, err := security.LoadBundle(r.Manifest, now)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(own.Certificate)
	for _, cert := range []*x509.Certificate{b.ServerCertificate().Leaf, readCert(t, r.Caller.CertFile)} {
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
			t.Errorf("%v: %v", cert.Subject, err)
		}
	}
	if _, err := devbundle.ParseCA(devbundle.CertificatePEM(leaf), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})); err == nil {
		t.Error("a leaf was taken for a CA")
	}
}
