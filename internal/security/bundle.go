package security

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/execplane/execplane/pkg/problem"

	"github.com/execplane/execplane/pkg/grant"
)

// Bundle is one validated generation of security material: the server certificate, the
// client CA bundle, the grant keys (as a pkg/grant key set, verifier and signers) and the
// client policy, with the manifest's generation and the full-bundle digest. It is immutable
// and safe for concurrent use; a reload builds a new one. Its String and GoString forms
// name the generation and digest only, never key material.
type Bundle struct {
	generation uint64
	// digest covers the manifest and the pinned files: what the high-water mark records.
	digest string
	// content covers every file, a renewable server certificate and key included: two
	// bundles with the same content are the same material.
	content string
	dir     string

	serverCert tls.Certificate
	// renewable: the server certificate is renewable in place (serverCertificate.renewal);
	// leafWindows are the validity windows of its verified chains to the pinned issuers.
	renewable   bool
	leafWindows []validityWindow
	clientCAs   []*x509.Certificate
	clientPool  *x509.CertPool
	policies    *Policies

	keys      *grant.KeySet
	verifier  *grant.Verifier
	envSigner *grant.Signer
	runSigner *grant.Signer
	grants    GrantSettings

	// recordKeys seal and verify durable commands' records, the sealing key first.
	recordKeys []RecordKey

	// serverTLS is the per-bundle server configuration that ServerTLSConfig hands out on
	// every handshake while this bundle is current.
	serverTLS *tls.Config
}

// RecordKey is a key durable commands' records are sealed with (docs/commands.md "Sealed
// records"). Secret: it is never logged, and never leaves the gateway.
type RecordKey struct {
	ID     string
	Secret []byte
}

// String names the key, never its secret.
func (k RecordKey) String() string { return "record key " + k.ID }

// GoString names the key, never its secret.
func (k RecordKey) GoString() string { return k.String() }

// readRecordKeys decodes the record keys' files: standard base64 of RecordKeyBytes bytes,
// surrounding white space ignored.
func readRecordKeys(m *Manifest, files map[string][]byte, p *problem.List) []RecordKey {
	var out []RecordKey
	for i, k := range m.RecordKeys {
		data, ok := files[k.File]
		if !ok {
			continue
		}
		key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(data)))
		if err != nil || len(key) != RecordKeyBytes {
			p.Add(fmt.Sprintf("recordKeys[%d].file", i), "must hold the base64 encoding of %d bytes", RecordKeyBytes)
			continue
		}
		out = append(out, RecordKey{ID: k.ID, Secret: key})
	}
	return out
}

// GrantSettings are the bundle's grant parameters.
type GrantSettings struct {
	// Issuer and Audience are the grants' iss and aud.
	Issuer   string
	Audience string
	// EnvironmentLifetime and RunLifetime are the lifetimes of the two grant kinds.
	EnvironmentLifetime time.Duration
	RunLifetime         time.Duration
}

// LoadBundle reads the manifest at manifestPath and every file it names and validates the
// whole bundle at now, reporting every problem at once (joined, wrapping ErrInvalidBundle;
// a missing file also matches fs.ErrNotExist). It returns a bundle only if nothing is wrong:
// all or nothing.
//
// The manifest path's symbolic links are resolved once, and every file is read beneath the
// directory of the resolved manifest through an os.Root. In a Kubernetes projected volume
// (manifest.yaml → ..data/manifest.yaml, ..data → ..2026_11_29_...) that directory is one
// immutable snapshot, so the files read belong together even if the kubelet swaps ..data
// meanwhile; a snapshot removed mid-read fails the load, and the caller retries.
//
// What is checked (docs/security.md): the manifest's own rules (ParseManifest); each file is
// a regular file within its size cap and matches its pin in fileDigests (a renewable server
// certificate and its key have none); the server key matches the certificate, whose leaf is
// valid now, no CA, has the serverAuth usage and a SAN, with a chain in order; a renewable
// leaf also chains to its pinned issuers at now and carries exactly the names the manifest
// lists; the client CA bundle is non-empty, CAs only, one valid now;
// the grant keys parse, the private half matches the public one, the key set is well-formed
// for pkg/grant and its signing key verifies now; the grant lifetimes are within pkg/grant's
// bounds; the client identities are canonical and unique and the policies consistent.
func LoadBundle(manifestPath string, now time.Time) (*Bundle, error) {
	if manifestPath == "" {
		return nil, fmt.Errorf("%w: no manifest path", ErrInvalidBundle)
	}
	resolved, err := filepath.EvalSymlinks(manifestPath)
	if err != nil {
		return nil, fmt.Errorf("%w: manifest: %w", ErrInvalidBundle, err)
	}
	if resolved, err = filepath.Abs(resolved); err != nil {
		return nil, fmt.Errorf("%w: manifest: %w", ErrInvalidBundle, err)
	}
	root, err := os.OpenRoot(filepath.Dir(resolved))
	if err != nil {
		return nil, fmt.Errorf("%w: manifest directory: %w", ErrInvalidBundle, err)
	}
	defer root.Close()
	manifest, err := readCapped(root, filepath.Base(resolved), MaxManifestBytes)
	if err != nil {
		return nil, fmt.Errorf("%w: manifest: %w", ErrInvalidBundle, err)
	}

	var p problem.List
	m := parseManifest(manifest, &p)
	if m == nil {
		return nil, p.Err(ErrInvalidBundle)
	}
	files := readFiles(root, m, &p)
	b := &Bundle{generation: m.Generation, dir: root.Name()}
	b.build(m, files, now, &p)
	if err := p.Err(ErrInvalidBundle); err != nil {
		return nil, err
	}
	pinned := make(map[string][]byte, len(files))
	for _, f := range m.files() {
		if data, ok := files[f.name]; ok && f.pinned {
			pinned[f.name] = data
		}
	}
	b.digest = bundleDigest(manifest, pinned)
	b.content = bundleDigest(manifest, files)
	return b, nil
}

// readFiles reads every file the manifest names (once each, within its cap) and checks it
// against its pin. Problems are recorded in p; the files read are returned by name.
func readFiles(root *os.Root, m *Manifest, p *problem.List) map[string][]byte {
	files := make(map[string][]byte)
	for _, f := range m.files() {
		if _, done := files[f.name]; done || checkFilePath(f.name) != nil {
			continue // reported by the manifest's validation
		}
		data, err := readCapped(root, f.name, f.limit)
		if err != nil {
			p.AddAt(f.field, err)
			continue
		}
		if pin := m.FileDigests[f.name]; f.pinned && validFileDigest(pin) && FileDigest(data) != pin {
			p.Add(f.field, "content does not match its pin in fileDigests: the file and the manifest "+
				"belong to different generations (a torn bundle)")
		}
		files[f.name] = data
	}
	return files
}

// build validates the material and fills b, recording problems in p.
func (b *Bundle) build(m *Manifest, files map[string][]byte, now time.Time, p *problem.List) {
	certPEM, haveCert := files[m.ServerCertificate.CertFile]
	keyPEM, haveKey := files[m.ServerCertificate.KeyFile]
	var serverOK bool
	if haveCert && haveKey {
		b.serverCert, serverOK = checkServerCertificate(p, certPEM, keyPEM, now)
	}
	if r := m.ServerCertificate.Renewal; r != nil {
		b.renewable = true
		if data, ok := files[r.IssuerCABundle]; ok {
			issuers, issuersOK := checkCABundle(p, "serverCertificate.renewal.issuerCABundle", data, now)
			if serverOK && issuersOK {
				b.leafWindows = checkRenewal(p, r, b.serverCert, issuers, now)
			}
		}
	}
	if data, ok := files[m.ClientCABundle]; ok {
		b.clientCAs, _ = checkCABundle(p, "clientCABundle", data, now)
		b.clientPool = x509.NewCertPool()
		for _, c := range b.clientCAs {
			b.clientPool.AddCert(c)
		}
	}
	b.buildGrants(m, files, now, p)
	b.recordKeys = readRecordKeys(m, files, p)
	if !p.Empty() {
		return
	}
	// Every client entry validated, so this cannot fail; a failure is still not ignored.
	policies, err := m.policies()
	if err != nil {
		p.AddAt("clients", err)
		return
	}
	b.policies = policies
	b.serverTLS = newServerConfig(b.serverCert, b.clientPool, b.policies)
}

// buildGrants parses the grant keys and builds the key set, verifier and signers.
// pkg/grant's constructors are called only on input the manifest's own checks passed, so
// that a problem is reported once.
func (b *Bundle) buildGrants(m *Manifest, files map[string][]byte, now time.Time, p *problem.List) {
	before := p.Len()
	var keys []grant.Key
	var signing grant.SignerConfig
	for i, e := range m.GrantKeys {
		at := fmt.Sprintf("grantKeys[%d]", i)
		data, ok := files[e.PublicKeyFile]
		if !ok {
			continue
		}
		pub, err := parseGrantPublicKey(data)
		if err != nil {
			p.Add(at+".publicKeyFile", "%v", err)
			continue
		}
		keys = append(keys, grant.Key{ID: e.ID, Public: pub, State: e.State, VerifyFrom: e.VerifyFrom, VerifyUntil: e.VerifyUntil})
		if e.State != grant.KeySigning {
			continue
		}
		if data, ok = files[e.PrivateKeyFile]; !ok {
			continue
		}
		priv, err := parseGrantPrivateKey(data)
		switch {
		case err != nil:
			p.Add(at+".privateKeyFile", "%v", err)
		case !pub.Equal(priv.Public()):
			p.Add(at+".privateKeyFile", "does not match publicKeyFile")
		default:
			signing = grant.SignerConfig{KeyID: e.ID, PrivateKey: priv}
		}
	}
	if !m.grantsOK || p.Len() != before || len(keys) != len(m.GrantKeys) || signing.PrivateKey == nil {
		return // the grant settings are incomplete or wrong, and that has been reported
	}
	ks, err := grant.NewKeySet(keys...)
	if err != nil {
		p.AddAt("grantKeys", err)
		return
	}
	if err := grant.CheckRotation(nil, ks, now); err != nil {
		p.AddAt("grantKeys", err)
		return
	}
	b.keys = ks
	b.grants = GrantSettings{
		Issuer:              m.Issuer,
		Audience:            m.Audience,
		EnvironmentLifetime: time.Duration(m.GrantLifetimes.Environment),
		RunLifetime:         time.Duration(m.GrantLifetimes.Run),
	}
	// The verifier's ceiling is pkg/grant's (zero MaxLifetime), not the configured
	// lifetimes: lowering a lifetime in a new generation must not refuse grants issued, and
	// still unexpired, under the previous one.
	if b.verifier, err = grant.NewVerifier(grant.VerifierConfig{Issuer: m.Issuer, Audience: m.Audience, Keys: ks}); err != nil {
		p.AddAt("issuer/audience", err)
		return
	}
	signing.Issuer, signing.Audience = m.Issuer, m.Audience
	env, run := signing, signing
	env.Lifetime, run.Lifetime = b.grants.EnvironmentLifetime, b.grants.RunLifetime
	if b.envSigner, err = grant.NewSigner(env); err != nil {
		p.AddAt("grantLifetimes.environment", err)
	}
	if b.runSigner, err = grant.NewSigner(run); err != nil {
		p.AddAt("grantLifetimes.run", err)
	}
}

// Generation is the manifest's generation.
func (b *Bundle) Generation() uint64 { return b.generation }

// Digest is the bundle digest the high-water mark records: "sha256:" and 64 lowercase hex
// digits over the manifest and every file it pins (bundleDigest documents the
// construction). A renewable server certificate and its key are not pinned and not in it:
// they are identified by ServerLeaf. Without serverCertificate.renewal every file is pinned
// and this is the digest of the whole bundle.
func (b *Bundle) Digest() string { return b.digest }

// ServerLeaf identifies the server certificate when it is renewable in place
// (serverCertificate.renewal); ok is false otherwise, when Digest covers it.
func (b *Bundle) ServerLeaf() (leaf ServerLeaf, ok bool) {
	if !b.renewable || b.serverCert.Leaf == nil {
		return ServerLeaf{}, false
	}
	return ServerLeaf{NotBefore: b.serverCert.Leaf.NotBefore, Digest: FileDigest(b.serverCert.Leaf.Raw)}, true
}

// sameMaterial reports whether b and o hold the same bytes in every file, a renewable
// server certificate and key included.
func (b *Bundle) sameMaterial(o *Bundle) bool { return b.content == o.content }

// Dir is the directory the bundle was read from, after symbolic links were resolved (in a
// projected volume, the snapshot directory). For logs.
func (b *Bundle) Dir() string { return b.dir }

// ServerCertificate is the server's certificate chain and private key, for TLS.
func (b *Bundle) ServerCertificate() tls.Certificate { return b.serverCert }

// ClientCAs returns a new pool of the client CA certificates.
func (b *Bundle) ClientCAs() *x509.CertPool {
	pool := x509.NewCertPool()
	for _, c := range b.clientCAs {
		pool.AddCert(c)
	}
	return pool
}

// ClientCACertificates returns the client CA certificates, in bundle order.
func (b *Bundle) ClientCACertificates() []*x509.Certificate { return slices.Clone(b.clientCAs) }

// Policies is the client policy.
func (b *Bundle) Policies() *Policies { return b.policies }

// KeySet is the grant key set, for grant.CheckRotation between generations.
func (b *Bundle) KeySet() *grant.KeySet { return b.keys }

// Verifier verifies grants against the bundle's key set, issuer and audience, with
// pkg/grant's lifetime ceiling.
func (b *Bundle) Verifier() *grant.Verifier { return b.verifier }

// Signer returns the signer of grants of the given purpose (its lifetime is the bundle's
// for that purpose), or nil for an unknown purpose.
func (b *Bundle) Signer(purpose grant.Purpose) *grant.Signer {
	switch purpose {
	case grant.PurposeEnvironment:
		return b.envSigner
	case grant.PurposeRun:
		return b.runSigner
	}
	return nil
}

// GrantSettings are the issuer, audience and lifetimes.
func (b *Bundle) GrantSettings() GrantSettings { return b.grants }

// RecordKeys returns the record keys, the sealing key first.
func (b *Bundle) RecordKeys() []RecordKey { return slices.Clone(b.recordKeys) }

// String names the bundle by generation and digest. It never includes key material.
func (b Bundle) String() string {
	return fmt.Sprintf("security bundle generation %d (%s)", b.generation, b.digest)
}

// GoString is String, so that %#v does not print the private keys either.
func (b Bundle) GoString() string { return b.String() }

// Format writes String for every verb, so that no verb (%d, %x, %+v) prints the fields, and
// with them the private keys, of a Bundle or of a struct holding one.
func (b Bundle) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, b.String()) }
