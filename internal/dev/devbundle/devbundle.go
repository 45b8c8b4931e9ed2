package devbundle

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"time"
)

// Defaults and bounds of Options.
const (
	// DefaultTrustDomain is the SPIFFE trust domain of the generated identities. ".test" is
	// reserved (RFC 2606), so it can never name a real organisation.
	DefaultTrustDomain = "execplane.test"
	// DefaultValidity is long enough for a test run or a demo session, short enough that a
	// leaked development bundle is not a credential for long.
	DefaultValidity = 7 * 24 * time.Hour
	// MaxValidity caps Options.Validity: development material is not meant to live longer.
	MaxValidity = 90 * 24 * time.Hour
	// DefaultIssuer is the grants' issuer and audience.
	DefaultIssuer = "execplane"
	// GrantKeyID is the kid of the generated grant signing key.
	GrantKeyID = "dev-1"
	// RecordKeyID names the record sealing key.
	RecordKeyID = "dev-record-1"
	// EnvironmentGrantLifetime and RunGrantLifetime are the manifest's grant lifetimes.
	EnvironmentGrantLifetime = 10 * time.Minute
	RunGrantLifetime         = 5 * time.Minute
)

// File names written into the bundle directory.
const (
	ManifestFile   = "manifest.yaml"
	CACertFile     = "ca.crt"
	CAKeyFile      = "ca.key"
	ServerCertFile = "server.crt"
	ServerKeyFile  = "server.key"
	// ServerIssuerFile is the renewable server certificate's pinned issuer bundle (a copy of
	// the CA certificate), written only with Options.RenewableServer.
	ServerIssuerFile = "server-issuer.crt"
	GrantPublicFile  = "grant-" + GrantKeyID + ".pub"
	GrantKeyFile     = "grant-" + GrantKeyID + ".key"
	RecordKeyFile    = "record-" + RecordKeyID + ".key"
)

// File modes: private keys are readable by their owner only.
const (
	dirMode    = 0o700
	keyMode    = 0o600
	publicMode = 0o644
)

// trustDomainPattern is the SPIFFE trust-domain form security.ParseClientIdentity accepts.
var trustDomainPattern = regexp.MustCompile(`^[a-z0-9_-]+(\.[a-z0-9_-]+)*$`)

// extraNamePattern is the form of an extra client's name.
var extraNamePattern = regexp.MustCompile(`^[a-z0-9-]{1,32}$`)

// Options configure Generate. The zero value is a usable bundle for localhost.
type Options struct {
	// DNSNames are server certificate SANs in addition to "localhost".
	DNSNames []string
	// IPAddresses are server certificate SANs in addition to 127.0.0.1 and ::1.
	IPAddresses []net.IP
	// TrustDomain of the client identities; empty means DefaultTrustDomain.
	TrustDomain string
	// Generation of the manifest; zero means 1.
	Generation uint64
	// Validity of every certificate; zero means DefaultValidity; at most MaxValidity.
	Validity time.Duration
	// ServerValidity, when set, is the server certificate's own validity, at most Validity:
	// a short-lived leaf under a longer-lived CA, as cert-manager issues them.
	ServerValidity time.Duration
	// RenewableServer marks the server certificate renewable in place in the manifest
	// (serverCertificate.renewal: its issuer pinned as ServerIssuerFile, its names listed,
	// the certificate and key not pinned), so Result.IssueServer's certificates may replace
	// it without a new generation.
	RenewableServer bool
	// Now is the generation time; zero means time.Now().
	Now time.Time
	// CA, when set, signs the bundle's certificates and is its client CA bundle (and, with
	// RenewableServer, the pinned server issuer) instead of a CA of the bundle's own: an
	// operator's CA, as cert-manager's CA Issuer signs with. Its key is written as ca.key.
	CA *CA
	// ExactServerNames: the server certificate names DNSNames and IPAddresses only, without
	// localhost and the loopback addresses (the names a cert-manager Certificate lists).
	ExactServerNames bool
	// Extra are more clients beside the three built in, for tests of authorisation (other
	// clients, scoped administrators, clients without capabilities).
	Extra []ExtraClient
}

// ExtraClient is an additional client and its policy.
type ExtraClient struct {
	// Name is a short [a-z0-9-] name: the identity is spiffe://<trust domain>/client/<name>,
	// the files client-<name>.crt and .key.
	Name string
	// MayAttestOwner and Administrator are the policy's capabilities.
	MayAttestOwner, Administrator bool
	// AdministratorFor scopes Administrator to these identities.
	AdministratorFor []string
}

// Client is a generated client identity and its credentials.
type Client struct {
	// Identity is the client's URI SAN (a SPIFFE ID).
	Identity string
	// CertFile and KeyFile are its certificate and PKCS#8 key.
	CertFile, KeyFile string
}

// Result lists what Generate wrote. Paths are absolute.
type Result struct {
	// Dir is the bundle directory; Manifest the manifest in it.
	Dir, Manifest string
	// Generation is the manifest's generation.
	Generation uint64
	// CA signs the server and client certificates and is the client CA bundle; clients use
	// CACert to verify the server. CAKey lets tests and demos issue more certificates.
	CACert, CAKey string
	// ServerCert and ServerKey serve the gateway and the controller.
	ServerCert, ServerKey string
	// ServerDNSNames and ServerIPAddresses are the server certificate's names (IssueServer
	// issues for them). ServerIssuer is the pinned issuer file, with Options.RenewableServer.
	ServerDNSNames    []string
	ServerIPAddresses []net.IP
	ServerIssuer      string
	// GrantKeyID names the Ed25519 grant signing key in GrantPublicKey / GrantPrivateKey.
	GrantKeyID                      string
	GrantPublicKey, GrantPrivateKey string
	// RecordKey is the record sealing key's file (RecordKeyID).
	RecordKey string
	// Caller may attest owners; Administrator administers every client's environments;
	// Gateway is the gateway's identity towards the controller (no capability).
	Caller, Administrator, Gateway Client
	// Extra holds Options.Extra's clients by name.
	Extra map[string]Client
}

// Generate writes a development bundle into dir, which must not exist or be empty.
func Generate(dir string, opts Options) (*Result, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if dir == "" {
		return nil, errors.New("devbundle: a directory is required")
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return nil, err
	}
	if err := prepareDir(dir); err != nil {
		return nil, err
	}
	g := &generator{dir: dir, opts: opts, files: map[string][]byte{}}
	return g.run()
}

func (o Options) withDefaults() (Options, error) {
	if o.TrustDomain == "" {
		o.TrustDomain = DefaultTrustDomain
	}
	if len(o.TrustDomain) > 253 || !trustDomainPattern.MatchString(o.TrustDomain) {
		return o, errors.New("devbundle: the trust domain must be lowercase dot-separated labels of [a-z0-9_-]")
	}
	if o.Generation == 0 {
		o.Generation = 1
	}
	if o.Validity == 0 {
		o.Validity = DefaultValidity
	}
	if o.Validity < 0 || o.Validity > MaxValidity {
		return o, fmt.Errorf("devbundle: validity must be positive and at most %s", MaxValidity)
	}
	if o.ServerValidity == 0 {
		o.ServerValidity = o.Validity
	}
	if o.ServerValidity < 0 || o.ServerValidity > o.Validity {
		return o, errors.New("devbundle: the server validity must be positive and at most the validity")
	}
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
	return o, nil
}

// prepareDir creates dir (mode 0700) or checks that it is an empty directory.
func prepareDir(dir string) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return os.MkdirAll(dir, dirMode)
	case err != nil:
		return fmt.Errorf("devbundle: %w", err)
	case len(entries) > 0:
		return fmt.Errorf("devbundle: %s is not empty; refusing to overwrite", dir)
	}
	return nil
}

type generator struct {
	dir   string
	opts  Options
	files map[string][]byte // name → content, for the manifest's pins
}

func (g *generator) run() (*Result, error) {
	o := g.opts
	ca := o.CA
	if ca == nil {
		var err error
		if ca, err = NewCA("execplane development CA", o.Now, o.Validity); err != nil {
			return nil, err
		}
	}
	r := &Result{Dir: g.dir, Manifest: g.path(ManifestFile), Generation: o.Generation, GrantKeyID: GrantKeyID, Extra: map[string]Client{}}
	caKey, err := PrivateKeyPEM(ca.Key)
	if err != nil {
		return nil, err
	}
	if r.CACert, err = g.write(CACertFile, CertificatePEM(ca.Certificate), publicMode); err != nil {
		return nil, err
	}
	if r.CAKey, err = g.write(CAKeyFile, caKey, keyMode); err != nil {
		return nil, err
	}
	r.ServerDNSNames = append([]string{"localhost"}, o.DNSNames...)
	r.ServerIPAddresses = append([]net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, o.IPAddresses...)
	if o.ExactServerNames {
		r.ServerDNSNames, r.ServerIPAddresses = slices.Clone(o.DNSNames), slices.Clone(o.IPAddresses)
	}
	server := serverSpec(r)
	server.NotBefore, server.NotAfter = o.Now.Add(-backdate), o.Now.Add(o.ServerValidity)
	if r.ServerCert, r.ServerKey, err = g.issueSpec(ca, "server", server); err != nil {
		return nil, err
	}
	if o.RenewableServer {
		if r.ServerIssuer, err = g.write(ServerIssuerFile, CertificatePEM(ca.Certificate), publicMode); err != nil {
			return nil, err
		}
	}
	clients := []struct {
		name string
		path string
		out  *Client
	}{
		{"caller", "client/caller", &r.Caller},
		{"admin", "client/admin", &r.Administrator},
		{"gateway", "execplane/gateway", &r.Gateway},
	}
	extra := make([]Client, len(o.Extra))
	for i, x := range o.Extra {
		if !extraNamePattern.MatchString(x.Name) || x.Name == "caller" || x.Name == "admin" {
			return nil, fmt.Errorf("devbundle: extra client name %q: want 1..32 of [a-z0-9-], not caller or admin", x.Name)
		}
		clients = append(clients, struct {
			name string
			path string
			out  *Client
		}{"client-" + x.Name, "client/" + x.Name, &extra[i]})
	}
	for _, c := range clients {
		id := "spiffe://" + o.TrustDomain + "/" + c.path
		spec := LeafSpec{CommonName: c.name, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, URIs: []string{id}}
		c.out.Identity = id
		if c.out.CertFile, c.out.KeyFile, err = g.issue(ca, c.name, spec); err != nil {
			return nil, err
		}
	}
	for i, x := range o.Extra {
		r.Extra[x.Name] = extra[i]
	}
	if err := g.recordKey(r); err != nil {
		return nil, err
	}
	if err := g.grantKey(r); err != nil {
		return nil, err
	}
	if _, err := g.write(ManifestFile, g.manifest(r), publicMode); err != nil {
		return nil, err
	}
	return r, nil
}

// issue issues a leaf valid for the bundle's validity and writes name.crt and name.key.
func (g *generator) issue(ca *CA, name string, spec LeafSpec) (certPath, keyPath string, err error) {
	spec.NotBefore, spec.NotAfter = g.opts.Now.Add(-backdate), g.opts.Now.Add(g.opts.Validity)
	return g.issueSpec(ca, name, spec)
}

// issueSpec issues a leaf as spec says and writes name.crt and name.key.
func (g *generator) issueSpec(ca *CA, name string, spec LeafSpec) (certPath, keyPath string, err error) {
	cert, key, err := ca.Issue(spec)
	if err != nil {
		return "", "", err
	}
	keyPEM, err := PrivateKeyPEM(key)
	if err != nil {
		return "", "", err
	}
	if certPath, err = g.write(name+".crt", CertificatePEM(cert), publicMode); err != nil {
		return "", "", err
	}
	if keyPath, err = g.write(name+".key", keyPEM, keyMode); err != nil {
		return "", "", err
	}
	return certPath, keyPath, nil
}

// recordKey writes the record sealing key: 32 random bytes, base64 on one line.
func (g *generator) recordKey(r *Result) error {
	var key [32]byte
	if _, err := rand.Read(key[:]); err != nil {
		return err
	}
	var err error
	r.RecordKey, err = g.write(RecordKeyFile, []byte(base64.StdEncoding.EncodeToString(key[:])+"\n"), keyMode)
	return err
}

func (g *generator) grantKey(r *Result) error {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	pubPEM, err := PublicKeyPEM(pub)
	if err != nil {
		return err
	}
	privPEM, err := PrivateKeyPEM(priv)
	if err != nil {
		return err
	}
	if r.GrantPublicKey, err = g.write(GrantPublicFile, pubPEM, publicMode); err != nil {
		return err
	}
	r.GrantPrivateKey, err = g.write(GrantKeyFile, privPEM, keyMode)
	return err
}

// write creates name in the bundle directory (never overwriting) and returns its path.
func (g *generator) write(name string, data []byte, mode os.FileMode) (string, error) {
	path := g.path(name)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return "", fmt.Errorf("devbundle: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return "", fmt.Errorf("devbundle: %w", err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("devbundle: %w", err)
	}
	g.files[name] = data
	return path, nil
}

func (g *generator) path(name string) string { return filepath.Join(g.dir, name) }

// digest is the manifest's pin of a file: "sha256:" and lowercase hex.
func digest(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}
