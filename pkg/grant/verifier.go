package grant

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/execplane/execplane/pkg/ident"
)

// allowedMethods pins the one algorithm grants are signed with. Everything else, "none" in
// any casing, HMAC (with whatever secret), RSA, ECDSA, is refused before a key is looked up.
var allowedMethods = []string{jwt.SigningMethodEdDSA.Alg()}

// VerifierConfig configures a Verifier. NewVerifier refuses anything incomplete or unsafe.
type VerifierConfig struct {
	// Issuer is the only iss accepted.
	Issuer string
	// Audience is the only aud accepted, as a single value.
	Audience string
	// MaxLifetime is the ceiling on exp - iat; zero means the package ceiling MaxLifetime,
	// and nothing above it is accepted.
	MaxLifetime time.Duration
	// Keys is the key set; a kid outside it, or outside its key's window, is refused.
	Keys *KeySet
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Verifier checks grants against an in-memory key set. It performs no I/O of any kind: no
// key is fetched, no header (jku, x5u, jwk, x5c) is followed. It is safe for concurrent use;
// a reload builds a new one.
type Verifier struct {
	issuer      string
	audience    string
	maxLifetime time.Duration
	keys        *KeySet
	now         func() time.Time
}

// Verified describes a grant that passed every check.
type Verified struct {
	// Purpose is the grant's purpose.
	Purpose Purpose
	// Binding is the expectation the grant matched (equal, claim by claim, to what it
	// carries). For environment grants the run fields are zero.
	Binding RunBinding
	// KeyID is the kid that signed it, for audit records.
	KeyID string
	// ID is its jti, for audit records.
	ID string
	// IssuedAt is its iat.
	IssuedAt time.Time
	// ExpiresAt is its exp: when it stops being accepted.
	ExpiresAt time.Time
}

// Subject is what an authenticated grant names, handed to an expectation function so that
// a caller can build its expectation from the current state (for example, find the
// reference of the named binding). It is only produced after the signature, issuer,
// audience, times and purpose have been checked.
type Subject struct {
	// Purpose is the grant's purpose, already checked against the one required.
	Purpose Purpose
	// BindingID is the binding the grant names.
	BindingID string
	// Environment is the environment incarnation the grant names.
	Environment ident.EnvironmentRef
	// RunID is empty for environment grants.
	RunID string
}

// NewVerifier validates cfg and builds a verifier. It reports every problem at once,
// wrapping ErrInvalidConfig.
func NewVerifier(cfg VerifierConfig) (*Verifier, error) {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	if !isJSONSafe(cfg.Issuer, MaxIssuerBytes) {
		bad("issuer must be 1..%d bytes of printable ASCII without %s", MaxIssuerBytes, jsonEscapedASCII)
	}
	if !isJSONSafe(cfg.Audience, MaxIssuerBytes) {
		bad("audience must be 1..%d bytes of printable ASCII without %s", MaxIssuerBytes, jsonEscapedASCII)
	}
	maxLifetime := cfg.MaxLifetime
	if maxLifetime == 0 {
		maxLifetime = MaxLifetime
	}
	if maxLifetime < MinLifetime || maxLifetime > MaxLifetime {
		bad("max lifetime %s outside %s..%s", cfg.MaxLifetime, MinLifetime, MaxLifetime)
	}
	if cfg.Keys == nil || len(cfg.Keys.keys) == 0 {
		bad("a key set built by NewKeySet is required")
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	return &Verifier{
		issuer:      cfg.Issuer,
		audience:    cfg.Audience,
		maxLifetime: maxLifetime,
		keys:        cfg.Keys,
		now:         now,
	}, nil
}

// VerifyEnvironment verifies an environment grant against want: the caller's identity, the
// owner, the binding and the environment (name, UID and current grant generation). The
// error precedence is VerifyRun's.
func (v *Verifier) VerifyEnvironment(token string, want EnvironmentBinding) (Verified, error) {
	return v.verify(token, PurposeEnvironment, func(Subject) (RunBinding, error) {
		return RunBinding{EnvironmentBinding: want}, nil
	})
}

// VerifyEnvironmentFunc is VerifyEnvironment for callers that learn part of the
// expectation from the grant itself (AcquireRun: the request names the environment, the
// grant names the binding). expect receives what the authenticated grant names and returns
// the expectation built from the current state, or an error, which is returned as is.
// Every claim is still compared with what expect returns. expect must not be nil.
func (v *Verifier) VerifyEnvironmentFunc(token string, expect func(Subject) (EnvironmentBinding, error)) (Verified, error) {
	return v.verify(token, PurposeEnvironment, func(s Subject) (RunBinding, error) {
		want, err := expect(s)
		return RunBinding{EnvironmentBinding: want}, err
	})
}

// VerifyRun verifies a run grant against want: the environment binding plus the current
// epoch, the run id and the current claim id.
//
// Exactly one error is returned, the first that applies in this order:
//
//  1. ErrOversized        longer than MaxTokenBytes; nothing was decoded
//  2. ErrMalformed        not three base64url segments: a JSON header, a JSON object payload
//  3. ErrBadAlgorithm     alg missing or not EdDSA
//  4. ErrUnknownKey       kid missing, ill-formed, unknown, or its key outside its window
//     (ErrMalformed for a crit header, or a duplicate or escaped header member name,
//     checked just before the kid)
//  5. ErrBadSignature     the signature does not verify
//     --- the token is authentic from here on ---
//  6. ErrMalformed        the payload, decoded only now and strictly (decode.go), has a
//     duplicate, escaped or unknown claim name, or an ill-typed claim;
//     then ErrWrongIssuer, ErrWrongAudience
//  7. ErrMalformed        a required claim (exp, iat, jti, purpose's binding claims) is missing
//  8. ErrLifetimeExceeded exp - iat above the ceiling
//  9. ErrExpired, ErrNotYetValid
//  10. ErrWrongPurpose
//  11. ErrMismatch        client, owner, binding, environment name, environment UID, run id
//  12. ErrRevoked, ErrNotObserved (generation)
//  13. ErrStaleEpoch, ErrNotObserved (epoch)
//  14. ErrMismatch        claim id
//
// Steps 1 to 5 look at nothing but syntax and the signature, so a token that is not ours
// is answered without a word about its claims, which are not even decoded: a token that is
// both expired and badly signed reports ErrBadSignature, and nothing an attacker chooses
// (exp, aud, ...) decides which error a forgery gets. After the signature, problems with
// the token itself come before problems with its use, and a grant for another environment
// reports the mismatch rather than a revocation or an epoch it cannot be compared with.
func (v *Verifier) VerifyRun(token string, want RunBinding) (Verified, error) {
	return v.verify(token, PurposeRun, func(Subject) (RunBinding, error) { return want, nil })
}

// VerifyRunFunc is VerifyRun with an expectation function, as VerifyEnvironmentFunc.
func (v *Verifier) VerifyRunFunc(token string, expect func(Subject) (RunBinding, error)) (Verified, error) {
	return v.verify(token, PurposeRun, expect)
}

// verify runs every check of VerifyRun's list, in order.
func (v *Verifier) verify(token string, purpose Purpose, expect func(Subject) (RunBinding, error)) (Verified, error) {
	// 1. The bound comes first: nothing of an oversized token is read, and refusing it costs
	// no allocation.
	if len(token) > MaxTokenBytes {
		return Verified{}, ErrOversized
	}
	if v == nil || v.keys == nil || expect == nil {
		return Verified{}, fmt.Errorf("%w: verifier not built by NewVerifier, or no expectation", ErrInvalidConfig)
	}
	// 2. A strict shape check before the library sees the string (see isCompactJWS).
	if !isCompactJWS(token) {
		return Verified{}, fmt.Errorf("%w: not a compact JWS", ErrMalformed)
	}
	now := v.now()
	var (
		payload   signedPayload
		kid       string
		keyErr    error
		keyLooked bool
	)
	parser := jwt.NewParser(
		jwt.WithValidMethods(allowedMethods),
		jwt.WithStrictDecoding(),
		// The library would validate claims it decoded leniently; payload keeps the bytes,
		// and the claims are decoded strictly, and validated, once the signature verified.
		jwt.WithoutClaimsValidation(),
	)
	_, err := parser.ParseWithClaims(token, &payload, func(t *jwt.Token) (any, error) {
		// Called only once the header and payload decoded and alg is EdDSA.
		keyLooked = true
		header, _, _ := strings.Cut(token, ".")
		if keyErr = checkHeader(parser, header); keyErr == nil {
			kid, keyErr = keyIDFrom(t.Header)
		}
		if keyErr != nil {
			return nil, keyErr
		}
		k, ok := v.keys.lookupShared(kid)
		switch {
		case !ok:
			keyErr = fmt.Errorf("%w: no such key", ErrUnknownKey)
		case !k.Verifies(now):
			keyErr = fmt.Errorf("%w: key outside its verification window", ErrUnknownKey)
		default:
			return k.Public, nil
		}
		return nil, keyErr
	})
	if err != nil {
		return Verified{}, preSignatureError(err, keyLooked, keyErr)
	}
	// Authentic from here on: the signature covers exactly the bytes decoded now.
	c, err := decodeClaims(payload.raw)
	if err != nil {
		return Verified{}, err
	}
	if err := v.checkClaims(&c, now); err != nil {
		return Verified{}, err
	}
	if c.Purpose != purpose {
		return Verified{}, ErrWrongPurpose
	}
	want, err := expect(Subject{
		Purpose:     c.Purpose,
		BindingID:   c.BindingID,
		Environment: ident.EnvironmentRef{Name: c.EnvironmentName, UID: c.EnvironmentUID},
		RunID:       c.RunID,
	})
	if err != nil {
		return Verified{}, err
	}
	if purpose == PurposeEnvironment {
		want = RunBinding{EnvironmentBinding: want.EnvironmentBinding}
	}
	if err := c.check(want); err != nil {
		return Verified{}, err
	}
	return Verified{
		Purpose:   c.Purpose,
		Binding:   want,
		KeyID:     kid,
		ID:        c.ID,
		IssuedAt:  c.IssuedAt.Time,
		ExpiresAt: c.ExpiresAt.Time,
	}, nil
}

// keyIDFrom extracts the kid from a decoded header, refusing anything but a well-formed string,
// and a header with critical extensions (RFC 7515 §4.1.11: an unknown "crit" must be refused).
func keyIDFrom(header map[string]any) (string, error) {
	if _, ok := header["crit"]; ok {
		return "", fmt.Errorf("%w: critical header extensions are not supported", ErrMalformed)
	}
	kid, ok := header["kid"].(string)
	if !ok || !ValidKeyID(kid) {
		return "", fmt.Errorf("%w: kid missing or ill-formed", ErrUnknownKey)
	}
	return kid, nil
}

// preSignatureError maps a library error, always raised before the signature verified (the
// parser does not validate claims), to steps 2 to 5. The library's own messages are dropped:
// some quote pieces of the token.
func preSignatureError(err error, keyLooked bool, keyErr error) error {
	switch {
	case keyErr != nil:
		return keyErr
	case errors.Is(err, jwt.ErrTokenMalformed):
		return fmt.Errorf("%w: undecodable header, payload or signature", ErrMalformed)
	case !keyLooked:
		// The library refuses an unregistered alg as unverifiable and a registered one that
		// is not allowed as a bad signature, both before asking for a key.
		return ErrBadAlgorithm
	case errors.Is(err, jwt.ErrTokenSignatureInvalid), errors.Is(err, jwt.ErrTokenUnverifiable):
		return ErrBadSignature
	default:
		return fmt.Errorf("%w: unverifiable token", ErrMalformed)
	}
}

// checkClaims runs steps 6 to 9 on the claims of an authentic token at now. It orders the
// problems and adds what the library's validator does not check (iat required, aud exactly
// one value, the lifetime ceiling, the payload's shape), then asks the validator: exp
// required and not past, nbf and iat not in the future, iss and aud.
func (v *Verifier) checkClaims(c *claims, now time.Time) error {
	if c.Issuer != v.issuer {
		return ErrWrongIssuer
	}
	if len(c.Audience) != 1 || c.Audience[0] != v.audience {
		return ErrWrongAudience
	}
	if c.ExpiresAt == nil {
		return fmt.Errorf("%w: missing exp claim", ErrMalformed)
	}
	if c.IssuedAt == nil {
		return fmt.Errorf("%w: missing iat claim", ErrMalformed)
	}
	for _, d := range []*jwt.NumericDate{c.ExpiresAt, c.IssuedAt, c.NotBefore} {
		// JSON numbers beyond int64 seconds convert to platform-dependent times; refuse
		// anything outside years 1970..9999 so the answer never depends on the platform.
		if d != nil && (d.Unix() < 0 || d.Unix() > maxUnixSeconds) {
			return fmt.Errorf("%w: date out of range", ErrMalformed)
		}
	}
	if err := c.checkShape(); err != nil {
		return err
	}
	lifetime := c.ExpiresAt.Sub(c.IssuedAt.Time)
	if lifetime <= 0 {
		return fmt.Errorf("%w: exp not after iat", ErrMalformed)
	}
	if lifetime > v.maxLifetime {
		return ErrLifetimeExceeded
	}
	// The library's validator, on claims whose signature has verified (its documented use).
	libErr := jwt.NewValidator(
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithIssuer(v.issuer),
		jwt.WithAudience(v.audience),
		jwt.WithLeeway(Leeway),
		jwt.WithTimeFunc(func() time.Time { return now }),
	).Validate(c)
	switch {
	case libErr == nil:
		return nil
	case errors.Is(libErr, jwt.ErrTokenExpired):
		return ErrExpired
	case errors.Is(libErr, jwt.ErrTokenNotValidYet), errors.Is(libErr, jwt.ErrTokenUsedBeforeIssued):
		return ErrNotYetValid
	default:
		// The library objected to something the checks above let through; refuse anyway.
		return fmt.Errorf("%w: claims refused", ErrMalformed)
	}
}
