package security

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/execplane/execplane/internal/dev/devbundle"
	"github.com/execplane/execplane/pkg/grant"
	"github.com/execplane/execplane/pkg/ident"
)

func TestLoadBundleDevBundle(t *testing.T) {
	f := newFixture(t)
	b := f.mustLoad()
	if b.Generation() != 1 || !validFileDigest(b.Digest()) {
		t.Fatalf("generation %d digest %q", b.Generation(), b.Digest())
	}
	ps := b.Policies()
	caller, _ := ps.Lookup(ClientIdentity(f.res.Caller.Identity))
	admin, _ := ps.Lookup(ClientIdentity(f.res.Administrator.Identity))
	gw, ok := ps.Lookup(ClientIdentity(f.res.Gateway.Identity))
	if !caller.CanAttestOwner() || caller.IsAdministrator() || !admin.AdministersClient(ClientIdentity(f.res.Caller.Identity)) ||
		!ok || gw.CanAttestOwner() || gw.IsAdministrator() || ps.Len() != 3 {
		t.Fatalf("policies: caller %+v admin %+v gateway %+v (%d)", caller, admin, gw, ps.Len())
	}
	if s := b.GrantSettings(); s.Issuer != "execplane" || s.RunLifetime != 5*time.Minute || s.EnvironmentLifetime != 10*time.Minute {
		t.Fatalf("grant settings %+v", s)
	}
	if b.Signer("other") != nil || b.KeySet().SigningKey().ID != devbundle.GrantKeyID {
		t.Fatal("signer or key set")
	}
	if n := len(b.ClientCACertificates()); n != 1 || b.ServerCertificate().Leaf == nil {
		t.Fatalf("%d CAs", n)
	}
	if err := b.ValidAt(time.Now()); err != nil {
		t.Fatal(err)
	}
	if got := b.ExpiresAt(); got.Before(time.Now().Add(6*24*time.Hour)) || got.After(time.Now().Add(8*24*time.Hour)) {
		t.Fatalf("ExpiresAt = %v", got)
	}
}

// TestBundleGrantsRoundTrip signs a grant of each kind with the bundle's signers and verifies
// it with the bundle's verifier: the bundle builds a working pkg/grant setup.
func TestBundleGrantsRoundTrip(t *testing.T) {
	b := newFixture(t).mustLoad()
	want := grant.RunBinding{
		EnvironmentBinding: grant.EnvironmentBinding{
			Client:          "spiffe://execplane.test/client/caller",
			OwnerHash:       strings.Repeat("ab", 32),
			BindingID:       "binding-1",
			Environment:     ident.EnvironmentRef{Name: "env-1", UID: "0b6c3f0e-8a4d-4a53-9d0e-6f2a1c2b3d4e"},
			GrantGeneration: 3,
		},
		Epoch: 2, RunID: "run-1", ClaimID: "claim-1",
	}
	env, err := b.Signer(grant.PurposeEnvironment).SignEnvironment(want.EnvironmentBinding)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Verifier().VerifyEnvironment(env.Token, want.EnvironmentBinding); err != nil {
		t.Fatal(err)
	}
	run, err := b.Signer(grant.PurposeRun).SignRun(want)
	if err != nil {
		t.Fatal(err)
	}
	v, err := b.Verifier().VerifyRun(run.Token, want)
	if err != nil || v.ExpiresAt.Sub(v.IssuedAt) != 5*time.Minute {
		t.Fatalf("VerifyRun = %+v, %v", v, err)
	}
}

func TestLoadBundleTornNewCertificateOldKey(t *testing.T) {
	f := newFixture(t)
	// A renewed server certificate (new key pair) whose key did not make it into the bundle.
	renewed := leafCert(t, f.ca, devbundle.LeafSpec{
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, DNSNames: []string{"localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
	})
	f.write(devbundle.ServerCertFile, devbundle.CertificatePEM(renewed.Leaf))

	t.Run("pins unchanged", func(t *testing.T) {
		_, err := f.load()
		wantProblems(t, err, "serverCertificate.certFile: content does not match its pin")
	})
	t.Run("pins recomputed", func(t *testing.T) {
		f.repin()
		_, err := f.load()
		wantProblems(t, err, "serverCertificate.keyFile: does not match the certificate")
	})
}

func TestLoadBundleTornCAUpdatedPolicyNot(t *testing.T) {
	f := newFixture(t)
	other, err := devbundle.NewCA("new CA", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// The CA Secret moved on; the manifest (policy, pins, generation) did not.
	f.write(devbundle.CACertFile, devbundle.CertificatePEM(other.Certificate))
	_, err = f.load()
	wantProblems(t, err, "clientCABundle: content does not match its pin", "torn bundle")
}

func TestLoadBundleTornManifestUpdatedFilesNot(t *testing.T) {
	f := newFixture(t)
	// The manifest of the next generation names a new CA the volume does not hold yet.
	f.m.Generation++
	f.m.FileDigests[devbundle.CACertFile] = FileDigest([]byte("the next CA bundle"))
	f.writeManifest()
	_, err := f.load()
	wantProblems(t, err, "clientCABundle: content does not match its pin")
}

func TestLoadBundleMissingFile(t *testing.T) {
	f := newFixture(t)
	if err := os.Remove(f.path(devbundle.ServerKeyFile)); err != nil {
		t.Fatal(err)
	}
	_, err := f.load()
	wantProblems(t, err, "serverCertificate.keyFile:")
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("error %v does not match fs.ErrNotExist", err)
	}
	if _, err := LoadBundle(filepath.Join(t.TempDir(), "absent.yaml"), time.Now()); !errors.Is(err, fs.ErrNotExist) || !errors.Is(err, ErrInvalidBundle) {
		t.Fatalf("missing manifest: %v", err)
	}
}

func TestLoadBundleReportsEveryProblem(t *testing.T) {
	f := newFixture(t)
	f.write(devbundle.CACertFile, []byte("not PEM"))
	f.m.Clients = append(f.m.Clients, ClientEntry{URI: "spiffe://execplane.test/x", AdministratorFor: []ClientIdentity{"spiffe://a/b"}})
	f.repin()
	if err := os.Remove(f.path(devbundle.ServerKeyFile)); err != nil {
		t.Fatal(err)
	}
	f.write(devbundle.GrantPublicFile, []byte("changed after pinning"))
	_, err := f.load()
	wantProblems(t, err,
		"serverCertificate.keyFile:",
		"clientCABundle: data outside PEM blocks",
		"clients[3]: security: invalid client policy: administratorFor requires administrator",
		"grantKeys[0].publicKeyFile: content does not match its pin",
		"grantKeys[0].publicKeyFile: data outside PEM blocks",
	)
}

func TestLoadBundleServerCertificateRules(t *testing.T) {
	tests := []struct {
		name string
		spec devbundle.LeafSpec
		want string
	}{
		{"expired", devbundle.LeafSpec{ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, DNSNames: []string{"localhost"},
			NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: time.Now().Add(-time.Hour)}, "the leaf is not valid now"},
		{"not yet valid", devbundle.LeafSpec{ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, DNSNames: []string{"localhost"},
			NotBefore: time.Now().Add(time.Hour), NotAfter: time.Now().Add(2 * time.Hour)}, "the leaf is not valid now"},
		{"clientAuth only", devbundle.LeafSpec{ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, DNSNames: []string{"localhost"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}, "the leaf lacks the serverAuth"},
		{"no SAN", devbundle.LeafSpec{ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}, "the leaf has no DNS or IP subject alternative name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			c := leafCert(t, f.ca, tt.spec)
			key, err := devbundle.PrivateKeyPEM(c.PrivateKey)
			if err != nil {
				t.Fatal(err)
			}
			f.write(devbundle.ServerCertFile, devbundle.CertificatePEM(c.Leaf))
			f.write(devbundle.ServerKeyFile, key)
			f.repin()
			_, err = f.load()
			wantProblems(t, err, "serverCertificate.certFile: "+tt.want)
		})
	}
	t.Run("chain out of order", func(t *testing.T) {
		f := newFixture(t)
		chain := append(f.read(devbundle.ServerCertFile), f.read(devbundle.ServerCertFile)...)
		f.write(devbundle.ServerCertFile, chain)
		f.repin()
		_, err := f.load()
		wantProblems(t, err, "certificate 0 is not signed by certificate 1")
	})
}

func TestLoadBundleClientCARules(t *testing.T) {
	f := newFixture(t)
	expired, err := devbundle.NewCA("old", time.Now().Add(-48*time.Hour), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	leaf := f.issueClient("spiffe://execplane.test/x").Leaf
	tests := []struct {
		name    string
		content []byte
		want    string
	}{
		{"a leaf in the bundle", append(f.read(devbundle.CACertFile), devbundle.CertificatePEM(leaf)...), "certificate 1 is not a CA certificate"},
		{"only expired CAs", devbundle.CertificatePEM(expired.Certificate), "no CA certificate is valid now"},
		{"an expired CA beside a current one is fine", append(f.read(devbundle.CACertFile), devbundle.CertificatePEM(expired.Certificate)...), ""},
		{"empty", []byte("\n"), "no PEM block"},
		{"trailing text", append(f.read(devbundle.CACertFile), "trailing"...), "data outside PEM blocks"},
		{"a key in the bundle", append(f.read(devbundle.CACertFile), f.read(devbundle.GrantPublicFile)...), `PEM block of type "PUBLIC KEY"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f.write(devbundle.CACertFile, tt.content)
			f.repin()
			_, err := f.load()
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			wantProblems(t, err, "clientCABundle: "+tt.want)
		})
	}
}

func TestLoadBundleGrantKeyRules(t *testing.T) {
	otherPub, otherPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	otherPubPEM, _ := devbundle.PublicKeyPEM(otherPub)
	otherPrivPEM, _ := devbundle.PrivateKeyPEM(otherPriv)
	ecPubPEM, _ := devbundle.PublicKeyPEM(newKey(t).Public())

	t.Run("private half of another key", func(t *testing.T) {
		f := newFixture(t)
		f.write(devbundle.GrantKeyFile, otherPrivPEM)
		f.repin()
		_, err := f.load()
		wantProblems(t, err, "grantKeys[0].privateKeyFile: does not match publicKeyFile")
	})
	t.Run("not Ed25519", func(t *testing.T) {
		f := newFixture(t)
		f.write(devbundle.GrantPublicFile, ecPubPEM)
		f.repin()
		_, err := f.load()
		wantProblems(t, err, "grantKeys[0].publicKeyFile: not an Ed25519 key")
	})
	t.Run("signing key published in the future", func(t *testing.T) {
		f := newFixture(t)
		f.m.GrantKeys[0].VerifyFrom = time.Now().Add(time.Hour).Truncate(time.Second)
		f.writeManifest()
		_, err := f.load()
		wantProblems(t, err, "signing key \"dev-1\" does not verify now")
	})
	t.Run("a verify-only key beside the signing key", func(t *testing.T) {
		f := newFixture(t)
		f.write("next.pub", otherPubPEM)
		f.m.GrantKeys = append(f.m.GrantKeys, GrantKeyEntry{ID: "dev-2", State: grant.KeyVerifyOnly, PublicKeyFile: "next.pub", VerifyFrom: time.Now().Truncate(time.Second)})
		f.repin()
		b := f.mustLoad()
		if len(b.KeySet().Keys()) != 2 {
			t.Fatal("the verify-only key is missing")
		}
	})
}

// wantProblems fails the test unless err is an ErrInvalidBundle containing every substring.
func wantProblems(t *testing.T, err error, want ...string) {
	t.Helper()
	if !errors.Is(err, ErrInvalidBundle) {
		t.Fatalf("error = %v; want ErrInvalidBundle", err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error lacks %q:\n%v", w, err)
		}
	}
}

// TestLoadBundleReportsGrantProblemsOnce: a grant-key problem the manifest's checks find is
// not reported again by pkg/grant's constructors.
func TestLoadBundleReportsGrantProblemsOnce(t *testing.T) {
	f := newFixture(t)
	f.m.GrantKeys[0].ID = "bad/kid"
	f.writeManifest()
	_, err := f.load()
	wantProblems(t, err, "grantKeys[0].id:")
	if n := strings.Count(err.Error(), "bytes of [A-Za-z0-9._-]"); n != 1 {
		t.Fatalf("the key id problem is reported %d times:\n%v", n, err)
	}
}

// Record keys: the file holds the base64 of exactly RecordKeyBytes bytes (white space
// around it ignored); anything else is a problem of that key, and a key's String never
// shows its secret.
func TestLoadBundleRecordKeys(t *testing.T) {
	f := newFixture(t)
	b := f.mustLoad()
	keys := b.RecordKeys()
	if len(keys) != 1 || keys[0].ID != devbundle.RecordKeyID || len(keys[0].Secret) != RecordKeyBytes {
		t.Fatalf("RecordKeys = %d keys", len(keys))
	}
	secret := base64.StdEncoding.EncodeToString(keys[0].Secret)
	if s := fmt.Sprintf("%v %+v %#v %s", keys[0], keys, keys[0], keys[0]); strings.Contains(s, secret) || strings.Contains(s, fmt.Sprint(keys[0].Secret[:4])) {
		t.Fatalf("a record key printed its secret: %s", s)
	}
	for name, content := range map[string]string{
		"not base64":  "not base64!!\n",
		"31 bytes":    base64.StdEncoding.EncodeToString(make([]byte, 31)),
		"33 bytes":    base64.StdEncoding.EncodeToString(make([]byte, 33)),
		"raw 32 byte": string(make([]byte, 32)),
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			f.write(devbundle.RecordKeyFile, []byte(content))
			f.repin()
			_, err := f.load()
			wantProblems(t, err, "recordKeys[0].file: must hold the base64 encoding of 32 bytes")
		})
	}
	t.Run("a second key verifies, the first seals", func(t *testing.T) {
		f := newFixture(t)
		f.write("next.key", []byte("  "+base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{9}, 32))+"\n\n"))
		f.m.RecordKeys = append([]RecordKeyEntry{{ID: "next", File: "next.key"}}, f.m.RecordKeys...)
		f.repin()
		keys := f.mustLoad().RecordKeys()
		if len(keys) != 2 || keys[0].ID != "next" || !bytes.Equal(keys[0].Secret, bytes.Repeat([]byte{9}, 32)) || keys[1].ID != devbundle.RecordKeyID {
			t.Fatalf("RecordKeys = %v", keys)
		}
	})
}
