package security

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/execplane/execplane/pkg/problem"

	"github.com/execplane/execplane/pkg/grant"
)

// Manifest is the security manifest (docs/security.md): the one file that names every piece
// of security material, pins each file's SHA-256, and carries the client policy and a
// generation. File names are relative to the manifest's directory.
type Manifest struct {
	// Version is the format version; only ManifestVersion is read.
	Version int `json:"version"`
	// Generation is raised on every change of the bundle (manifest or any file it names),
	// 1..MaxGeneration. The high-water mark refuses a lower one, and the same one with
	// other content.
	Generation uint64 `json:"generation"`
	// ServerCertificate names the server's certificate chain and private key.
	ServerCertificate ServerCertificateFiles `json:"serverCertificate"`
	// ClientCABundle names the PEM file of CA certificates client certificates must chain to.
	ClientCABundle string `json:"clientCABundle"`
	// GrantKeys are the grant keys with their rotation states (pkg/grant, docs/grants.md).
	GrantKeys []GrantKeyEntry `json:"grantKeys"`
	// Issuer and Audience are the grants' iss and aud.
	Issuer   string `json:"issuer"`
	Audience string `json:"audience"`
	// GrantLifetimes are the lifetimes of the two grant kinds.
	GrantLifetimes GrantLifetimes `json:"grantLifetimes"`
	// RecordKeys are the keys durable commands' records are sealed with (docs/commands.md
	// "Sealed records"): the first seals, every one verifies. 0..MaxRecordKeys: without
	// them (a manifest of the release before) records are written unsealed and every
	// answer about a command says unverified; they will be required in the next release.
	RecordKeys []RecordKeyEntry `json:"recordKeys,omitempty"`
	// Clients is the client policy.
	Clients []ClientEntry `json:"clients"`
	// FileDigests pins every file named above but a renewable server certificate and its key:
	// file name → "sha256:" and 64 lowercase hex digits of its content. It must name exactly
	// those files. It is what makes a torn bundle (a file updated without the manifest, or
	// the reverse) fail validation.
	FileDigests map[string]string `json:"fileDigests"`
	// grantsOK records that validation found no problem with the grant settings.
	grantsOK bool
}

// ServerCertificateFiles names the server's certificate chain (PEM, leaf first) and key.
type ServerCertificateFiles struct {
	// CertFile is the chain, leaf first; KeyFile the leaf's private key.
	CertFile string `json:"certFile"`
	KeyFile  string `json:"keyFile"`
	// Renewal, when set, makes the certificate renewable in place (docs/security.md
	// "Renewal in place"): CertFile and KeyFile are not pinned, and a new leaf replaces the
	// current one within a generation when it chains to the pinned issuers, carries exactly
	// these names, is valid and is newer (a later notBefore) than every leaf accepted before.
	Renewal *ServerCertificateRenewal `json:"renewal,omitempty"`
}

// ServerCertificateRenewal is what a renewable server certificate must keep across its
// renewals: the CAs it is issued by and its exact identity.
type ServerCertificateRenewal struct {
	// IssuerCABundle names a PEM file of CA certificates (pinned) that the leaf must chain to,
	// with the intermediates of CertFile, for the serverAuth usage.
	IssuerCABundle string `json:"issuerCABundle"`
	// DNSNames, IPAddresses and URIs are the leaf's subject alternative names, exactly:
	// a leaf with one more or one fewer is refused. Email SANs are refused.
	DNSNames    []string `json:"dnsNames,omitempty"`
	IPAddresses []string `json:"ipAddresses,omitempty"`
	URIs        []string `json:"uris,omitempty"`
}

// RecordKeyEntry is one record key in the manifest.
type RecordKeyEntry struct {
	// ID names the key in every record it seals: 1..64 bytes of [A-Za-z0-9._-].
	ID string `json:"id"`
	// File holds the key: the standard base64 encoding of RecordKeyBytes random bytes, on
	// one line ("openssl rand -base64 32").
	File string `json:"file"`
}

// GrantKeyEntry is one grant key in the manifest.
type GrantKeyEntry struct {
	// ID is the kid (grant.ValidKeyID).
	ID string `json:"id"`
	// State is signing, verify-only or retired.
	State grant.KeyState `json:"state"`
	// PublicKeyFile is a PEM "PUBLIC KEY" (PKIX) Ed25519 key.
	PublicKeyFile string `json:"publicKeyFile"`
	// PrivateKeyFile is a PEM "PRIVATE KEY" (PKCS#8) Ed25519 key: required for the signing
	// key, refused for any other.
	PrivateKeyFile string `json:"privateKeyFile,omitempty"`
	// VerifyFrom is when the key was published (RFC 3339).
	VerifyFrom time.Time `json:"verifyFrom"`
	// VerifyUntil is when a retired key stops verifying; required for retired keys only.
	VerifyUntil time.Time `json:"verifyUntil,omitzero"`
}

// GrantLifetimes are the lifetimes of environment and run grants, each in whole seconds
// within grant.MinLifetime..grant.MaxLifetime.
type GrantLifetimes struct {
	// Environment is the lifetime of environment grants; Run that of run grants.
	Environment Duration `json:"environment"`
	Run         Duration `json:"run"`
}

// ClientEntry is one client of the policy.
type ClientEntry struct {
	// URI is the client's identity, in canonical form (ParseClientIdentity).
	URI ClientIdentity `json:"uri"`
	// MayAttestOwner, Administrator and AdministratorFor are the ClientPolicy fields.
	MayAttestOwner   bool             `json:"mayAttestOwner,omitempty"`
	Administrator    bool             `json:"administrator,omitempty"`
	AdministratorFor []ClientIdentity `json:"administratorFor,omitempty"`
}

// Policy returns the entry's policy.
func (c ClientEntry) Policy() ClientPolicy {
	return ClientPolicy{MayAttestOwner: c.MayAttestOwner, Administrator: c.Administrator, AdministratorFor: c.AdministratorFor}
}

// Duration is a time.Duration written as a Go duration string ("5m", "90s"). Numbers are
// refused: a bare 300 has no unit.
type Duration time.Duration

// UnmarshalJSON reads a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return errors.New(`a duration must be a string such as "5m"`)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return errors.New(`a duration must be a string such as "5m"`)
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes the duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// ParseManifest decodes a manifest strictly (one YAML document; unknown fields, duplicate
// keys, keys differing only in case and ill-typed values refused) and validates everything
// that does not need the files it names. Every problem is reported at once, wrapping
// ErrInvalidBundle.
func ParseManifest(data []byte) (*Manifest, error) {
	var p problem.List
	m := parseManifest(data, &p)
	if err := p.Err(ErrInvalidBundle); err != nil {
		return nil, err
	}
	return m, nil
}

// parseManifest decodes and validates data, recording problems in p. It returns nil when
// the document cannot be decoded at all; otherwise the manifest, possibly with problems.
func parseManifest(data []byte, p *problem.List) *Manifest {
	if len(data) > MaxManifestBytes {
		p.Add("manifest", "exceeds %d bytes", MaxManifestBytes)
		return nil
	}
	var m Manifest
	if !decodeStrict(data, &m, p) {
		return nil
	}
	m.grantsOK = m.validate(p)
	return &m
}

// fileRef is a file the manifest names: where (its field path), which file, its cap, and
// whether fileDigests pins it (every file but a renewable server certificate and its key).
type fileRef struct {
	field  string
	name   string
	limit  int64
	pinned bool
}

// files lists every file the manifest names, in manifest order, skipping empty names.
func (m *Manifest) files() []fileRef {
	renewable := m.ServerCertificate.Renewal != nil
	refs := []fileRef{
		{"serverCertificate.certFile", m.ServerCertificate.CertFile, MaxCertificateFileBytes, !renewable},
		{"serverCertificate.keyFile", m.ServerCertificate.KeyFile, MaxKeyFileBytes, !renewable},
	}
	if renewable {
		refs = append(refs, fileRef{"serverCertificate.renewal.issuerCABundle", m.ServerCertificate.Renewal.IssuerCABundle, MaxCABundleBytes, true})
	}
	refs = append(refs, fileRef{"clientCABundle", m.ClientCABundle, MaxCABundleBytes, true})
	for i, k := range m.GrantKeys {
		refs = append(refs, fileRef{fmt.Sprintf("grantKeys[%d].publicKeyFile", i), k.PublicKeyFile, MaxKeyFileBytes, true})
		if k.PrivateKeyFile != "" {
			refs = append(refs, fileRef{fmt.Sprintf("grantKeys[%d].privateKeyFile", i), k.PrivateKeyFile, MaxKeyFileBytes, true})
		}
	}
	for i, k := range m.RecordKeys {
		refs = append(refs, fileRef{fmt.Sprintf("recordKeys[%d].file", i), k.File, MaxKeyFileBytes, true})
	}
	out := refs[:0]
	for _, r := range refs {
		if r.name != "" {
			out = append(out, r)
		}
	}
	return out
}

// validate records every problem of the manifest that needs no file, and reports whether
// the grant settings (keys, issuer, audience, lifetimes) had none: only then are pkg/grant's
// constructors run on them, so that a problem is not reported twice.
func (m *Manifest) validate(p *problem.List) (grantsOK bool) {
	if m.Version != ManifestVersion {
		p.Add("version", "must be %d", ManifestVersion)
	}
	if m.Generation < 1 || m.Generation > MaxGeneration {
		p.Add("generation", "must be 1..%d", uint64(MaxGeneration))
	}
	m.validateFiles(p)
	before := p.Len()
	m.validateGrantKeys(p)
	if m.Issuer == "" {
		p.Add("issuer", "is required")
	}
	if m.Audience == "" {
		p.Add("audience", "is required")
	}
	checkLifetime(p, "grantLifetimes.environment", time.Duration(m.GrantLifetimes.Environment))
	checkLifetime(p, "grantLifetimes.run", time.Duration(m.GrantLifetimes.Run))
	grantsOK = p.Len() == before
	m.validateRecordKeys(p)
	m.validateClients(p)
	return grantsOK
}

func (m *Manifest) validateFiles(p *problem.List) {
	if m.ServerCertificate.CertFile == "" {
		p.Add("serverCertificate.certFile", "is required")
	}
	if m.ServerCertificate.KeyFile == "" {
		p.Add("serverCertificate.keyFile", "is required")
	}
	if m.ClientCABundle == "" {
		p.Add("clientCABundle", "is required")
	}
	if r := m.ServerCertificate.Renewal; r != nil {
		r.validate(p)
	}
	referenced := map[string]fileRef{}
	for _, f := range m.files() {
		if err := checkFilePath(f.name); err != nil {
			p.Add(f.field, "%v", err)
			continue
		}
		if first, dup := referenced[f.name]; dup {
			p.Add(f.field, "names the same file as %s; every file has one role", first.field)
			continue
		}
		referenced[f.name] = f
	}
	for name, f := range referenced {
		d, ok := m.FileDigests[name]
		switch {
		case !f.pinned && ok:
			p.Add("fileDigests", "pins %s (%s), which is renewable (serverCertificate.renewal) and must not be pinned", quoteName(name), f.field)
		case !f.pinned:
		case !ok:
			p.Add("fileDigests", "has no digest for %s (%s)", quoteName(name), f.field)
		case !validFileDigest(d):
			p.Add("fileDigests["+quoteName(name)+"]", `must be "sha256:" and 64 lowercase hex digits`)
		}
	}
	for name := range m.FileDigests {
		if _, ok := referenced[name]; !ok {
			p.Add("fileDigests", "names %s, which the manifest does not reference", quoteName(name))
		}
	}
}

func (m *Manifest) validateGrantKeys(p *problem.List) {
	switch n := len(m.GrantKeys); {
	case n == 0:
		p.Add("grantKeys", "at least one key (the signing key) is required")
	case n > grant.MaxKeys:
		p.Add("grantKeys", "%d keys, at most %d", n, grant.MaxKeys)
	}
	ids := map[string]bool{}
	signing := 0
	for i, k := range m.GrantKeys {
		at := fmt.Sprintf("grantKeys[%d]", i)
		if !grant.ValidKeyID(k.ID) {
			p.Add(at+".id", "must be 1..%d bytes of [A-Za-z0-9._-]", grant.MaxKeyIDBytes)
		} else if ids[k.ID] {
			p.Add(at+".id", "duplicate key id")
		}
		ids[k.ID] = true
		switch k.State {
		case grant.KeySigning:
			signing++
			if k.PrivateKeyFile == "" {
				p.Add(at+".privateKeyFile", "is required for the signing key")
			}
		case grant.KeyVerifyOnly, grant.KeyRetired:
			if k.PrivateKeyFile != "" {
				p.Add(at+".privateKeyFile", "is refused for a %s key: only the signing key's private half is mounted", k.State)
			}
		default:
			p.Add(at+".state", "must be %s, %s or %s", grant.KeySigning, grant.KeyVerifyOnly, grant.KeyRetired)
		}
		if k.PublicKeyFile == "" {
			p.Add(at+".publicKeyFile", "is required")
		}
		if k.VerifyFrom.IsZero() {
			p.Add(at+".verifyFrom", "is required")
		}
		switch {
		case k.State == grant.KeyRetired && k.VerifyUntil.IsZero():
			p.Add(at+".verifyUntil", "is required for a retired key")
		case k.State == grant.KeyRetired && !k.VerifyUntil.After(k.VerifyFrom):
			p.Add(at+".verifyUntil", "must be after verifyFrom")
		case k.State != grant.KeyRetired && !k.VerifyUntil.IsZero():
			p.Add(at+".verifyUntil", "is only for retired keys")
		}
	}
	if len(m.GrantKeys) > 0 && signing != 1 {
		p.Add("grantKeys", "%d signing keys, exactly one is required", signing)
	}
}

func (m *Manifest) validateRecordKeys(p *problem.List) {
	if n := len(m.RecordKeys); n > MaxRecordKeys {
		p.Add("recordKeys", "%d keys, at most %d", n, MaxRecordKeys)
	}
	ids := map[string]bool{}
	for i, k := range m.RecordKeys {
		at := fmt.Sprintf("recordKeys[%d]", i)
		if !grant.ValidKeyID(k.ID) {
			p.Add(at+".id", "must be 1..%d bytes of [A-Za-z0-9._-]", grant.MaxKeyIDBytes)
		} else if ids[k.ID] {
			p.Add(at+".id", "duplicate key id")
		}
		ids[k.ID] = true
		if k.File == "" {
			p.Add(at+".file", "is required")
		}
	}
}

func checkLifetime(p *problem.List, path string, d time.Duration) {
	switch {
	case d < grant.MinLifetime || d > grant.MaxLifetime:
		p.Add(path, "must be %s..%s", grant.MinLifetime, grant.MaxLifetime)
	case d%time.Second != 0:
		p.Add(path, "must be whole seconds (grants carry dates in seconds)")
	}
}

func (m *Manifest) validateClients(p *problem.List) {
	switch n := len(m.Clients); {
	case n == 0:
		p.Add("clients", "at least one client is required (an empty policy refuses every caller)")
	case n > MaxClients:
		p.Add("clients", "%d clients, at most %d", n, MaxClients)
	}
	seen := map[ClientIdentity]int{}
	for i, c := range m.Clients {
		at := fmt.Sprintf("clients[%d]", i)
		if _, err := ParseClientIdentity(string(c.URI)); err != nil {
			p.AddAt(at+".uri", err)
		} else if first, dup := seen[c.URI]; dup {
			p.Add(at+".uri", "duplicate of clients[%d]", first)
		} else {
			seen[c.URI] = i
		}
		if err := c.Policy().Validate(); err != nil {
			p.AddAt(at, err)
		}
	}
}

// policies builds the allowlist from a manifest whose clients validated.
func (m *Manifest) policies() (*Policies, error) {
	byID := make(map[ClientIdentity]ClientPolicy, len(m.Clients))
	for _, c := range m.Clients {
		byID[c.URI] = c.Policy()
	}
	return NewPolicies(byID)
}

// checkFilePath enforces the file-name rules: a clean relative path of [A-Za-z0-9._-]
// components separated by "/", at most MaxFilePathBytes, no component starting with ".."
// (".." escapes; "..data" and "..2024_..." are the kubelet's own names in a projected
// volume, and reading through them would bypass the snapshot LoadBundle resolved).
func checkFilePath(name string) error {
	switch {
	case len(name) > MaxFilePathBytes:
		return fmt.Errorf("file name longer than %d bytes", MaxFilePathBytes)
	case filepath.IsAbs(name) || !filepath.IsLocal(name) || filepath.Clean(name) != name:
		return errors.New("must be a clean path relative to the manifest's directory")
	}
	for part := range strings.SplitSeq(name, "/") {
		if part == "." || strings.HasPrefix(part, "..") {
			return errors.New(`must name a file; no path component may be "." or start with ".."`)
		}
		for i := 0; i < len(part); i++ {
			if !isUnreservedNoTilde(part[i]) {
				return errors.New("file names are [A-Za-z0-9._-] components separated by /")
			}
		}
	}
	return nil
}

// quoteName quotes a file name for a problem message, truncated so a hostile manifest
// cannot make one message huge.
func quoteName(name string) string {
	const max = 64
	if len(name) > max {
		name = name[:max] + "..."
	}
	return fmt.Sprintf("%q", name)
}
