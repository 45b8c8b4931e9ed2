package security

import (
	"time"

	"github.com/execplane/execplane/pkg/grant"
)

// Bounds on identities and policies.
const (
	// MaxIdentityBytes bounds a client identity (the canonical URI SAN). It is the bound of
	// control.v1 Caller.client_uri and of pkg/grant's client claim, so that every identity
	// this package accepts can be forwarded to the controller and bound into a grant.
	MaxIdentityBytes = grant.MaxClientBytes

	// maxHostBytes bounds the host of an identity: the DNS limit on a domain name without its
	// trailing dot (RFC 1035 §2.3.4). SPIFFE trust domains are held to it too.
	maxHostBytes = 253

	// maxLabelBytes bounds one dot-separated label of an identity's host (RFC 1035 §2.3.4).
	maxLabelBytes = 63

	// MaxClients bounds the client policy. Every identity in policy may hold an entry in the
	// RPC limiter's per-client map and is scanned when AdministratorFor lists are checked;
	// a platform has a handful of calling services, and 256 leaves room for per-tenant
	// identities without letting a mistaken manifest grow every replica's tables.
	MaxClients = 256

	// MaxAdministratorFor bounds one administrator's scope list; it cannot usefully name more
	// clients than a policy holds.
	MaxAdministratorFor = MaxClients
)

// Bounds on the security manifest and the files it names. Every file is read with its cap
// checked before decoding, so a mistaken path (a log, a device, a huge file) cannot make a
// replica buffer or parse an unbounded input.
const (
	// ManifestVersion is the only manifest format version this package reads.
	ManifestVersion = 1

	// MaxManifestBytes bounds the manifest. Kubernetes caps a ConfigMap or Secret at 1 MiB,
	// so no mounted manifest can legitimately be larger.
	MaxManifestBytes = 1 << 20

	// MaxCertificateFileBytes bounds the server certificate file: a leaf and a few
	// intermediates in PEM are a few KiB.
	MaxCertificateFileBytes = 64 << 10

	// MaxCABundleBytes bounds the client CA bundle: MaxClientCAs certificates of a few KiB
	// each in PEM, with room to spare.
	MaxCABundleBytes = 512 << 10

	// MaxKeyFileBytes bounds a key file (server key, grant public or private key). An RSA-4096
	// PKCS#8 key is about 3.3 KiB in PEM; an Ed25519 key is about 120 bytes.
	MaxKeyFileBytes = 16 << 10
	// MaxRecordKeys bounds the record keys: the sealing key and those of a rotation (a
	// request to the helper carries each, derived).
	MaxRecordKeys = 8
	// RecordKeyBytes is the size of a record key: HMAC-SHA256's, and its output's.
	RecordKeyBytes = 32

	// MaxFilePathBytes bounds a file name in the manifest (a path relative to the manifest's
	// directory). Kubernetes' projected-volume item paths are short; 256 bytes is ample.
	MaxFilePathBytes = 256

	// MaxServerChainCertificates bounds the server certificate chain (leaf plus
	// intermediates). Public and private PKIs use one to three intermediates.
	MaxServerChainCertificates = 8

	// MaxClientCAs bounds the client CA bundle. Each certificate is a candidate root for
	// every client handshake; a rotation needs two or three, and 64 covers several
	// independent PKIs without making chain building expensive.
	MaxClientCAs = 64

	// MaxGeneration bounds the manifest generation to 2^53-1, the largest integer every JSON
	// implementation (kubectl, jq, JavaScript) represents exactly, so the generation recorded
	// in the high-water mark reads back unchanged whatever tool touches it.
	MaxGeneration = 1<<53 - 1
)

// Bounds on what a client presents in a handshake. They are checked on the certificates as
// received, before any chain is built, so the work a handshake can cause is bounded whatever
// the peer sends.
const (
	// MaxPeerCertificates bounds the certificates a client may present: a leaf and up to
	// three intermediates. Chain building tries combinations of presented intermediates; a
	// small cap keeps that bounded far below crypto/x509's own limit of 100 signature checks.
	MaxPeerCertificates = 4

	// MaxPeerCertificateBytes bounds one presented certificate (DER). A certificate with a
	// 2048-byte URI SAN and an RSA-4096 key is about 3 KiB.
	MaxPeerCertificateBytes = 8 << 10

	// MinRSAKeyBits is the smallest RSA key accepted anywhere (NIST SP 800-131A).
	MinRSAKeyBits = 2048

	// MaxRSAKeyBits is the largest RSA key accepted anywhere. Verification cost grows with the
	// square of the modulus; a huge key buys no security on our time scales and is a lever for
	// making every handshake expensive. crypto/tls refuses above 8192 bits already.
	MaxRSAKeyBits = 4096

	// HandshakeTimeout is the recommended bound on a TLS handshake (HandshakeDeadlineListener,
	// grpc.ConnectionTimeout). A TLS 1.3 handshake is two round trips; ten seconds tolerates
	// slow networks while a client that stalls mid-handshake holds its socket and goroutine
	// only that long.
	HandshakeTimeout = 10 * time.Second
)

// Bounds on the RPC limiter's configuration.
const (
	// MaxLimiterCapacity bounds the global and per-client limits of an RPCLimiter. It is a
	// sanity bound (every in-flight RPC holds a goroutine and buffers); the gateway's own
	// configuration is stricter.
	MaxLimiterCapacity = 1_000_000
)
