package grant

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// SignerConfig configures a Signer. NewSigner refuses anything incomplete or unsafe.
type SignerConfig struct {
	// KeyID is the kid written into every grant's header (ValidKeyID). It must name the
	// key set's signing key on every verifier.
	KeyID string
	// PrivateKey is the Ed25519 signing key (64 bytes: seed and public half).
	PrivateKey ed25519.PrivateKey
	// Issuer is written as iss and must be what verifiers expect: 1..MaxIssuerBytes of
	// printable ASCII without JSON-escaped characters.
	Issuer string
	// Audience is written as the single aud value, under the same rules as Issuer.
	Audience string
	// Lifetime is exp - iat of every grant, in MinLifetime..MaxLifetime. It is applied in
	// whole seconds, the precision of JWT dates.
	Lifetime time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Signer issues grants. It is safe for concurrent use; a key rotation builds a new one.
type Signer struct {
	kid      string
	key      ed25519.PrivateKey
	issuer   string
	audience string
	lifetime time.Duration
	now      func() time.Time
}

// Issued is a signed grant. Its String and GoString methods redact the token, so that
// printing an Issued, or a struct holding one, never writes a credential to a log.
type Issued struct {
	// Token is the compact JWT (at most MaxTokenBytes). Never log it.
	Token string
	// ExpiresAt is the grant's exp: when it stops being accepted.
	ExpiresAt time.Time
	// KeyID is the kid that signed it.
	KeyID string
	// ID is the grant's jti, for audit records.
	ID string
}

// String describes the grant without its token.
func (i Issued) String() string {
	return fmt.Sprintf("grant{id:%s kid:%s expires:%s token:[redacted]}", i.ID, i.KeyID, i.ExpiresAt.UTC().Format(time.RFC3339))
}

// GoString is String, so that %#v redacts too.
func (i Issued) GoString() string { return i.String() }

// NewSigner validates cfg and builds a signer. It reports every problem at once, wrapping
// ErrInvalidConfig; the messages never contain key material.
func NewSigner(cfg SignerConfig) (*Signer, error) {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	if !ValidKeyID(cfg.KeyID) {
		bad("key id must be 1..%d bytes of [A-Za-z0-9._-]", MaxKeyIDBytes)
	}
	if err := checkPrivateKey(cfg.PrivateKey); err != "" {
		bad("private key %s", err)
	}
	if !isJSONSafe(cfg.Issuer, MaxIssuerBytes) {
		bad("issuer must be 1..%d bytes of printable ASCII without %s", MaxIssuerBytes, jsonEscapedASCII)
	}
	if !isJSONSafe(cfg.Audience, MaxIssuerBytes) {
		bad("audience must be 1..%d bytes of printable ASCII without %s", MaxIssuerBytes, jsonEscapedASCII)
	}
	lifetime := cfg.Lifetime.Truncate(time.Second)
	if lifetime < MinLifetime || lifetime > MaxLifetime {
		bad("lifetime %s outside %s..%s", cfg.Lifetime, MinLifetime, MaxLifetime)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	return &Signer{
		kid:      cfg.KeyID,
		key:      slices.Clone(cfg.PrivateKey),
		issuer:   cfg.Issuer,
		audience: cfg.Audience,
		lifetime: lifetime,
		now:      now,
	}, nil
}

// checkPrivateKey returns what is wrong with key, or "". A private key whose public half
// does not belong to its seed would sign grants that never verify.
func checkPrivateKey(key ed25519.PrivateKey) string {
	if len(key) != ed25519.PrivateKeySize {
		return fmt.Sprintf("must be %d bytes", ed25519.PrivateKeySize)
	}
	derived := ed25519.NewKeyFromSeed(key.Seed())
	if subtle.ConstantTimeCompare(derived, key) != 1 {
		return "has a public half that does not match its seed"
	}
	return ""
}

// KeyID returns the kid the signer writes.
func (s *Signer) KeyID() string { return s.kid }

// PublicKey returns the public half of the signing key, to check it against a key set.
func (s *Signer) PublicKey() ed25519.PublicKey {
	return slices.Clone(s.key.Public().(ed25519.PublicKey))
}

// SignEnvironment issues an environment grant for b. It refuses an invalid binding with
// ErrInvalidInput.
func (s *Signer) SignEnvironment(b EnvironmentBinding) (Issued, error) {
	if err := b.Validate(); err != nil {
		return Issued{}, err
	}
	c := claims{Purpose: PurposeEnvironment}
	c.setEnvironment(b)
	return s.sign(&c)
}

// SignRun issues a run grant for r. It refuses an invalid binding with ErrInvalidInput.
func (s *Signer) SignRun(r RunBinding) (Issued, error) {
	if err := r.Validate(); err != nil {
		return Issued{}, err
	}
	c := claims{Purpose: PurposeRun, Epoch: r.Epoch, RunID: r.RunID, ClaimID: r.ClaimID}
	c.setEnvironment(r.EnvironmentBinding)
	return s.sign(&c)
}

// sign fills the registered claims of c and signs it.
func (s *Signer) sign(c *claims) (Issued, error) {
	if s == nil || s.key == nil {
		return Issued{}, fmt.Errorf("%w: signer not built by NewSigner", ErrInvalidConfig)
	}
	issued := s.now().Truncate(time.Second)
	expires := issued.Add(s.lifetime)
	var id [jtiBytes]byte
	_, _ = rand.Read(id[:]) // crypto/rand.Read never fails; it crashes the program instead.

	c.Issuer = s.issuer
	c.Audience = jwt.ClaimStrings{s.audience}
	c.IssuedAt = jwt.NewNumericDate(issued)
	c.NotBefore = jwt.NewNumericDate(issued)
	c.ExpiresAt = jwt.NewNumericDate(expires)
	c.ID = base64.RawURLEncoding.EncodeToString(id[:])

	t := jwt.NewWithClaims(jwt.SigningMethodEdDSA, c)
	t.Header["kid"] = s.kid
	token, err := t.SignedString(s.key)
	if err != nil {
		// Only a JSON or key-type failure lands here; neither message holds key material.
		return Issued{}, fmt.Errorf("grant: signing: %w", err)
	}
	if len(token) > MaxTokenBytes {
		// Unreachable within the input bounds (a test proves the worst case fits); kept so
		// that a future claim can never make the signer emit what verifiers refuse.
		return Issued{}, ErrOversized
	}
	return Issued{Token: token, ExpiresAt: expires, KeyID: s.kid, ID: c.ID}, nil
}
