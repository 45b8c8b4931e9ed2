package grant

import "time"

// Bounds on tokens, lifetimes and clocks. Every one is a constant so that a deployment cannot
// configure its way out of them; docs/grants.md gives the reasoning at length.
const (
	// MaxTokenBytes bounds a compact token. The public API documents grants as at most 4096
	// bytes (execution.v1 Grant.token), and the verifier refuses anything longer before it
	// decodes a single byte, so a hostile caller cannot make it parse megabytes of base64 and
	// JSON. The signer's input bounds keep every token it issues well below it.
	MaxTokenBytes = 4096

	// MaxKeyIDBytes bounds a key id. A kid is looked up in memory only, but it arrives from
	// the (unauthenticated) token header, so it is checked against a short, strict charset
	// before the lookup; 64 bytes is room for a date and a counter with some prose.
	MaxKeyIDBytes = 64

	// MaxKeys bounds a key set. A rotation needs at most three live keys (retired, signing,
	// verify-only); the margin allows overlapping rotations, and the bound keeps a hostile or
	// mistaken manifest from growing the verifier without limit.
	MaxKeys = 16

	// Leeway is the clock skew tolerated on exp, nbf and iat. Gateways and the controller run
	// on cluster nodes synchronised by NTP; 5 s covers ordinary drift without meaningfully
	// extending a grant's life.
	Leeway = 5 * time.Second

	// MinLifetime is the shortest grant lifetime a signer accepts: twice the leeway, so that
	// the leeway never dominates the lifetime a grant was issued for.
	MinLifetime = 2 * Leeway

	// MaxLifetime is the ceiling on any grant's lifetime (exp - iat), for signers and
	// verifiers alike. A leaked grant is a bearer credential until it expires (the mTLS
	// binding aside), and a retired signing key must keep verifying for this long, so it is
	// kept short: three times the longest run-claim TTL (5 min), enough for a caller to renew
	// a run claim at leisure.
	MaxLifetime = 15 * time.Minute

	// MaxReloadDelay is how long a new security-material generation may take to reach every
	// gateway: the kubelet's sync of projected Secret and ConfigMap volumes (about a minute
	// by default) plus the SecurityManager's reload. Rotation counts it twice: a new key must
	// have been published this long before it signs, and a retired key must keep verifying
	// this much longer than MaxLifetime, because a lagging gateway may still sign with it.
	MaxReloadDelay = 2 * time.Minute

	// RetirementDelay is the shortest time a key that stopped signing must go on verifying:
	// the longest grant lifetime, plus the leeway a verifier grants on exp, plus the time a
	// lagging gateway may still sign with the old key.
	RetirementDelay = MaxLifetime + Leeway + MaxReloadDelay

	// MaxIssuerBytes bounds the issuer and the audience. They are configuration, not input;
	// the bound keeps every token the signer can produce below MaxTokenBytes.
	MaxIssuerBytes = 128

	// MaxClientBytes bounds the client identity (the canonical URI SAN), as control.v1
	// Caller.client_uri does. Grants carry its SHA-256, so its length never reaches a token.
	MaxClientBytes = 2048

	// MaxIdentifierBytes bounds binding and run ids (docs/api.md, "Identifiers").
	MaxIdentifierBytes = 128

	// MaxEnvironmentNameBytes bounds an environment name, a DNS-1123 label.
	MaxEnvironmentNameBytes = 63

	// UIDBytes is the length of an environment UID, a canonical UUID.
	UIDBytes = 36

	// MaxClaimIDBytes bounds a run claim id (execution.v1 RunClaim.claim_id: opaque, 1..64).
	MaxClaimIDBytes = 64

	// HashHexBytes is the length of a lowercase hex SHA-256 (owner and client hashes).
	HashHexBytes = 64

	// maxUnixSeconds is 9999-12-31T23:59:59Z, the latest date a grant may carry. Larger
	// JSON numbers would convert to platform-dependent times.
	maxUnixSeconds = 253402300799

	// jtiBytes is the entropy of a token id: 128 bits, so ids never collide in practice.
	jtiBytes = 16
)
