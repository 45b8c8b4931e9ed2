package grant

import (
	"errors"
	"fmt"

	"github.com/execplane/execplane/pkg/apierror"
)

// Verification errors. Verify returns exactly one of them (possibly wrapped with a short,
// token-free explanation), chosen by the precedence documented on Verifier.VerifyRun; test
// with errors.Is. None of their messages ever contains a token, a key or a claim value.
// Each wraps its class of the API's vocabulary (pkg/apierror): ErrRevoked, ErrStaleEpoch and
// ErrNotObserved their own, every other one apierror.ErrGrantInvalid: one reason for every
// bad grant, and a message naming the check that refused it (never a claim's value, and
// nothing of the claims of a token whose signature did not verify).
var (
	// ErrOversized: the token is longer than MaxTokenBytes. Nothing of it was decoded.
	ErrOversized = fmt.Errorf("%w: token too large", apierror.ErrGrantInvalid)
	// ErrMalformed: the token is not a compact JWS of base64url segments carrying JSON, or a
	// required claim (exp, iat, jti, purpose, a binding claim) is missing or ill-typed.
	ErrMalformed = fmt.Errorf("%w: malformed token", apierror.ErrGrantInvalid)
	// ErrBadAlgorithm: the header names no algorithm or one other than EdDSA ("none" in any
	// casing, HMAC, RSA, ECDSA, ...).
	ErrBadAlgorithm = fmt.Errorf("%w: algorithm not allowed", apierror.ErrGrantInvalid)
	// ErrUnknownKey: the header's kid is missing, ill-formed, not in the key set, or names a
	// key outside its verification window.
	ErrUnknownKey = fmt.Errorf("%w: unknown signing key", apierror.ErrGrantInvalid)
	// ErrBadSignature: the signature does not verify under the key the kid names.
	ErrBadSignature = fmt.Errorf("%w: bad signature", apierror.ErrGrantInvalid)
	// ErrWrongIssuer: the iss claim is missing or not the expected issuer.
	ErrWrongIssuer = fmt.Errorf("%w: wrong issuer", apierror.ErrGrantInvalid)
	// ErrWrongAudience: the aud claim is missing or is not exactly the expected audience.
	ErrWrongAudience = fmt.Errorf("%w: wrong audience", apierror.ErrGrantInvalid)
	// ErrLifetimeExceeded: exp - iat is above the verifier's lifetime ceiling.
	ErrLifetimeExceeded = fmt.Errorf("%w: lifetime above ceiling", apierror.ErrGrantInvalid)
	// ErrExpired: exp is in the past (beyond the leeway).
	ErrExpired = fmt.Errorf("%w: expired", apierror.ErrGrantInvalid)
	// ErrNotYetValid: nbf or iat is in the future (beyond the leeway).
	ErrNotYetValid = fmt.Errorf("%w: not yet valid", apierror.ErrGrantInvalid)
	// ErrWrongPurpose: an environment grant where a run grant is required, or the reverse.
	ErrWrongPurpose = fmt.Errorf("%w: wrong purpose", apierror.ErrGrantInvalid)
	// ErrMismatch: a binding claim differs from the expectation (client, owner, binding,
	// environment name or UID, run or claim id). The wrapped *MismatchError names the claim.
	ErrMismatch = fmt.Errorf("%w: binding mismatch", apierror.ErrGrantInvalid)
	// ErrRevoked: the grant's generation is older than the environment's: RevokeEnvironment
	// ran after it was issued.
	ErrRevoked = fmt.Errorf("%w: the grant was issued before the revocation", apierror.ErrRevoked)
	// ErrStaleEpoch: the run grant's epoch is older than the environment's: another
	// AcquireRun or a completed replacement fenced it.
	ErrStaleEpoch = fmt.Errorf("%w: the grant's epoch was superseded", apierror.ErrStaleEpoch)
	// ErrNotObserved: the grant's epoch or generation is newer than the environment state
	// the caller compared it with. The grant is authentic; the caller's view (an informer
	// cache) lags behind the controller. Refuse, and let the client retry.
	ErrNotObserved = fmt.Errorf("%w: the grant is newer than the observed environment", apierror.ErrUnavailable)
)

// Errors of construction and signing.
var (
	// ErrInvalidConfig: a signer, verifier or key-set configuration is unsafe or incomplete.
	ErrInvalidConfig = errors.New("grant: invalid configuration")
	// ErrInvalidInput: a binding to sign is incomplete or ill-formed.
	ErrInvalidInput = errors.New("grant: invalid input")
	// ErrUnsafeRotation: a key-set transition would refuse grants that should verify, or let
	// a key sign before every gateway can verify it.
	ErrUnsafeRotation = errors.New("grant: unsafe key rotation")
)

// Claim names a binding claim, for MismatchError. The set is closed, so a claim is safe to
// use as a metric label.
type Claim string

// The binding claims a verifier compares.
const (
	// ClaimClient: the grant was issued to another client identity.
	ClaimClient Claim = "client"
	// ClaimOwner: the grant is for another owner.
	ClaimOwner Claim = "owner"
	// ClaimBinding: the grant is for another binding.
	ClaimBinding Claim = "binding"
	// ClaimEnvironmentName: the grant is for another environment.
	ClaimEnvironmentName Claim = "environment name"
	// ClaimEnvironmentUID: the grant is for another incarnation of the environment (it was
	// deleted and re-created under the same name).
	ClaimEnvironmentUID Claim = "environment uid"
	// ClaimRun: the grant is for another run id.
	ClaimRun Claim = "run id"
	// ClaimClaimID: the grant is for another run claim.
	ClaimClaimID Claim = "claim id"
)

// MismatchError reports which binding claim differed. It matches ErrMismatch with errors.Is.
// It names the claim only: the values stay out of errors and logs.
type MismatchError struct {
	// Claim is the first binding claim that differed.
	Claim Claim
}

// Error names the claim, never its values.
func (e *MismatchError) Error() string { return ErrMismatch.Error() + ": " + string(e.Claim) }

// Unwrap makes errors.Is(err, ErrMismatch) (and so apierror.ErrGrantInvalid) hold.
func (e *MismatchError) Unwrap() error { return ErrMismatch }
