package grant

import (
	"errors"
	"fmt"

	"github.com/golang-jwt/jwt/v5"

	"github.com/execplane/execplane/pkg/ident"
)

// Purpose is the kind of a grant. A grant of one purpose never verifies as the other.
type Purpose string

const (
	// PurposeEnvironment marks an environment grant (EnsureEnvironment, AttachEnvironment):
	// it proves that a binding is attached to one environment incarnation, and AcquireRun
	// requires it.
	PurposeEnvironment Purpose = "environment"
	// PurposeRun marks a run grant (AcquireRun, RenewRun): it authorises file and command
	// operations under one run claim.
	PurposeRun Purpose = "run"
)

// EnvironmentBinding is what an environment grant binds. For signing it is the binding
// being attested; for verifying it is the expectation: the authenticated caller, the request
// and the environment as currently observed.
type EnvironmentBinding struct {
	// Client is the caller's identity: the canonical URI SAN of its client certificate.
	// Grants carry its SHA-256 only.
	Client string
	// OwnerHash is the lowercase hex SHA-256 of the owner the client acts for.
	OwnerHash string
	// BindingID is the binding that holds the reference.
	BindingID string
	// Environment is the environment incarnation (name and UID).
	Environment ident.EnvironmentRef
	// GrantGeneration is the environment's grant generation: at signing, the generation the
	// grant is issued under; at verification, the current one. RevokeEnvironment increments
	// it, and every grant issued under an older generation is dead (DESIGN.md §2).
	GrantGeneration uint64
}

// RunBinding is what a run grant binds: an environment binding plus one run claim.
type RunBinding struct {
	EnvironmentBinding
	// Epoch is the environment's epoch: at signing, the epoch the claim was acquired at; at
	// verification, the current one.
	Epoch uint64
	// RunID is the caller's run id.
	RunID string
	// ClaimID is the server-chosen id of the run claim.
	ClaimID string
}

// claims is the JWT payload of both grant kinds. The registered claims carry iss, aud, exp,
// nbf, iat and jti (never sub); the run fields are absent from environment grants. The
// signer encodes it with encoding/json; the verifier decodes it with decodeClaims only.
type claims struct {
	jwt.RegisteredClaims
	Purpose         Purpose `json:"purpose"`
	ClientHash      string  `json:"client_hash"`
	OwnerHash       string  `json:"owner_hash"`
	BindingID       string  `json:"binding_id"`
	EnvironmentName string  `json:"env_name"`
	EnvironmentUID  string  `json:"env_uid"`
	GrantGeneration uint64  `json:"grant_generation"`
	Epoch           uint64  `json:"epoch,omitempty"`
	RunID           string  `json:"run_id,omitempty"`
	ClaimID         string  `json:"claim_id,omitempty"`
}

// claimCount is the number of claims field knows: a grant carries at most this many.
const claimCount = 16

// field returns where decodeClaims decodes the claim named name: the field whose json tag
// (here or in jwt.RegisteredClaims) is exactly name, or nil for any other name, in any
// other case. sub is not among them: the signer never writes it and nothing checks it.
// TestClaimFieldsMatchTags keeps this table and the tags the signer encodes with in step.
func (c *claims) field(name string) any {
	switch name {
	case "iss":
		return &c.Issuer
	case "aud":
		return &c.Audience
	case "exp":
		return &c.ExpiresAt
	case "nbf":
		return &c.NotBefore
	case "iat":
		return &c.IssuedAt
	case "jti":
		return &c.ID
	case "purpose":
		return &c.Purpose
	case "client_hash":
		return &c.ClientHash
	case "owner_hash":
		return &c.OwnerHash
	case "binding_id":
		return &c.BindingID
	case "env_name":
		return &c.EnvironmentName
	case "env_uid":
		return &c.EnvironmentUID
	case "grant_generation":
		return &c.GrantGeneration
	case "epoch":
		return &c.Epoch
	case "run_id":
		return &c.RunID
	case "claim_id":
		return &c.ClaimID
	}
	return nil
}

// Validate reports every problem with b as a binding to sign, wrapping ErrInvalidInput. The
// messages name fields, never values.
func (b EnvironmentBinding) Validate() error {
	var errs []error
	bad := func(field, rule string) { errs = append(errs, fmt.Errorf("%w: %s %s", ErrInvalidInput, field, rule)) }
	if !isPrintableASCII(b.Client, MaxClientBytes) {
		bad("client", fmt.Sprintf("must be 1..%d bytes of printable ASCII", MaxClientBytes))
	}
	if !isLowerHex(b.OwnerHash, HashHexBytes) {
		bad("owner hash", fmt.Sprintf("must be %d lowercase hex digits", HashHexBytes))
	}
	if !isIdentifier(b.BindingID) {
		bad("binding id", "must be an identifier (docs/api.md)")
	}
	if !isDNSLabel(b.Environment.Name) {
		bad("environment name", "must be a DNS-1123 label")
	}
	if !isUUID(b.Environment.UID) {
		bad("environment uid", "must be a canonical lowercase UUID")
	}
	return errors.Join(errs...)
}

// Validate reports every problem with r as a run binding to sign, wrapping ErrInvalidInput.
func (r RunBinding) Validate() error {
	var errs []error
	if err := r.EnvironmentBinding.Validate(); err != nil {
		errs = append(errs, err)
	}
	if !isIdentifier(r.RunID) {
		errs = append(errs, fmt.Errorf("%w: run id must be an identifier (docs/api.md)", ErrInvalidInput))
	}
	if !isJSONSafe(r.ClaimID, MaxClaimIDBytes) {
		errs = append(errs, fmt.Errorf("%w: claim id must be 1..%d bytes of printable ASCII without %s",
			ErrInvalidInput, MaxClaimIDBytes, jsonEscapedASCII))
	}
	return errors.Join(errs...)
}

// setEnvironment fills the binding claims of c from b.
func (c *claims) setEnvironment(b EnvironmentBinding) {
	c.ClientHash = ident.ClientHash(b.Client)
	c.OwnerHash = b.OwnerHash
	c.BindingID = b.BindingID
	c.EnvironmentName = b.Environment.Name
	c.EnvironmentUID = b.Environment.UID
	c.GrantGeneration = b.GrantGeneration
}

// checkEnvironment compares the identity claims with the expectation: whose grant it is
// (client, owner, binding) and for which environment incarnation (name, UID).
func (c *claims) checkEnvironment(want EnvironmentBinding) error {
	switch {
	case c.ClientHash != ident.ClientHash(want.Client):
		return &MismatchError{Claim: ClaimClient}
	case c.OwnerHash != want.OwnerHash:
		return &MismatchError{Claim: ClaimOwner}
	case c.BindingID != want.BindingID:
		return &MismatchError{Claim: ClaimBinding}
	case c.EnvironmentName != want.Environment.Name:
		return &MismatchError{Claim: ClaimEnvironmentName}
	case c.EnvironmentUID != want.Environment.UID:
		return &MismatchError{Claim: ClaimEnvironmentUID}
	}
	return nil
}

// checkGeneration compares the grant generation with the current one.
func (c *claims) checkGeneration(current uint64) error {
	switch {
	case c.GrantGeneration < current:
		return ErrRevoked
	case c.GrantGeneration > current:
		return fmt.Errorf("%w: grant generation", ErrNotObserved)
	}
	return nil
}

// checkEpoch compares the run grant's epoch with the current one.
func (c *claims) checkEpoch(current uint64) error {
	switch {
	case c.Epoch < current:
		return ErrStaleEpoch
	case c.Epoch > current:
		return fmt.Errorf("%w: epoch", ErrNotObserved)
	}
	return nil
}

// check compares every binding claim with the expectation, in the order documented on
// Verifier.VerifyRun: identity (a grant for something else), then the counters (a grant
// that was good and is no longer), then the claim id. For environment grants want's run
// fields are ignored, and the payload carries none.
func (c *claims) check(want RunBinding) error {
	if err := c.checkEnvironment(want.EnvironmentBinding); err != nil {
		return err
	}
	if c.Purpose == PurposeRun && c.RunID != want.RunID {
		return &MismatchError{Claim: ClaimRun}
	}
	if err := c.checkGeneration(want.GrantGeneration); err != nil {
		return err
	}
	if c.Purpose != PurposeRun {
		return nil
	}
	if err := c.checkEpoch(want.Epoch); err != nil {
		return err
	}
	if c.ClaimID != want.ClaimID {
		return &MismatchError{Claim: ClaimClaimID}
	}
	return nil
}

// checkShape refuses a payload that lacks a claim its purpose requires. The signer never
// produces one; this is defence in depth against a payload signed by something else that
// holds our key, so that an empty claim can never equal an empty expectation.
func (c *claims) checkShape() error {
	missing := func(name string) error { return fmt.Errorf("%w: missing %s claim", ErrMalformed, name) }
	switch {
	case c.ID == "":
		return missing("jti")
	case c.ClientHash == "":
		return missing("client_hash")
	case c.OwnerHash == "":
		return missing("owner_hash")
	case c.BindingID == "":
		return missing("binding_id")
	case c.EnvironmentName == "":
		return missing("env_name")
	case c.EnvironmentUID == "":
		return missing("env_uid")
	}
	if c.Purpose == PurposeEnvironment {
		if c.Epoch != 0 || c.RunID != "" || c.ClaimID != "" {
			return fmt.Errorf("%w: run claims in a grant of purpose %q", ErrMalformed, PurposeEnvironment)
		}
		return nil
	}
	if c.Purpose != PurposeRun {
		return nil // refused as ErrWrongPurpose
	}
	switch {
	case c.RunID == "":
		return missing("run_id")
	case c.ClaimID == "":
		return missing("claim_id")
	}
	return nil
}
