package grant

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// KeyState is where a key is in its rotation: published (verify-only), in use (signing), or
// on its way out (retired).
type KeyState string

const (
	// KeyVerifyOnly: the key verifies but does not sign yet. A new key is published in this
	// state before any gateway signs with it, so that every gateway verifies its grants.
	KeyVerifyOnly KeyState = "verify-only"
	// KeySigning: the key signs new grants (and verifies). A key set has exactly one.
	KeySigning KeyState = "signing"
	// KeyRetired: the key no longer signs and verifies only until its VerifyUntil, which is
	// at least RetirementDelay after it stopped signing.
	KeyRetired KeyState = "retired"
)

// Key is one public grant key with its state and verification window.
type Key struct {
	// ID is the kid of the grants it signs (ValidKeyID).
	ID string
	// Public is the Ed25519 public key.
	Public ed25519.PublicKey
	// State is the key's rotation state.
	State KeyState
	// VerifyFrom is when the key was published: it verifies from this instant on. Required.
	VerifyFrom time.Time
	// VerifyUntil is when a retired key stops verifying (exclusive). Required for retired
	// keys, and must be zero for the others: a key in use has no end until it is retired.
	VerifyUntil time.Time
}

// Verifies reports whether k verifies grants at now: now is within [VerifyFrom,
// VerifyUntil), a zero VerifyUntil meaning no end.
func (k Key) Verifies(now time.Time) bool {
	if now.Before(k.VerifyFrom) {
		return false
	}
	return k.VerifyUntil.IsZero() || now.Before(k.VerifyUntil)
}

// Signs reports whether k may sign grants at now: it is the signing key and verifies.
func (k Key) Signs(now time.Time) bool {
	return k.State == KeySigning && k.Verifies(now)
}

// EarliestRetirement is the earliest VerifyUntil of a key that stopped signing at
// stoppedSigning: every grant it signed, even by a gateway that had not yet reloaded, has
// expired by then.
func EarliestRetirement(stoppedSigning time.Time) time.Time {
	return stoppedSigning.Add(RetirementDelay)
}

// validate reports every structural problem with k.
func (k Key) validate() []string {
	var p []string
	if !ValidKeyID(k.ID) {
		p = append(p, fmt.Sprintf("key id must be 1..%d bytes of [A-Za-z0-9._-]", MaxKeyIDBytes))
	}
	if len(k.Public) != ed25519.PublicKeySize {
		p = append(p, fmt.Sprintf("public key must be %d bytes", ed25519.PublicKeySize))
	}
	if k.VerifyFrom.IsZero() {
		p = append(p, "verify-from is required")
	}
	switch k.State {
	case KeySigning, KeyVerifyOnly:
		if !k.VerifyUntil.IsZero() {
			p = append(p, fmt.Sprintf("a %s key has no verify-until; retire it instead", k.State))
		}
	case KeyRetired:
		if !k.VerifyUntil.After(k.VerifyFrom) {
			p = append(p, "a retired key needs a verify-until after its verify-from")
		}
	default:
		p = append(p, "state must be signing, verify-only or retired")
	}
	return p
}

// KeySet is an immutable set of public keys indexed by kid. It is safe for concurrent use;
// a reload builds a new one.
type KeySet struct {
	keys    map[string]Key
	signing string
}

// NewKeySet validates keys and builds a set: every kid well-formed and unique, every public
// key of the right size, windows consistent with states, exactly one signing key, at most
// MaxKeys keys. It reports every problem at once, wrapping ErrInvalidConfig, naming keys by
// kid only (a kid that is not well-formed is named by position).
func NewKeySet(keys ...Key) (*KeySet, error) {
	var errs []error
	if len(keys) > MaxKeys {
		return nil, fmt.Errorf("%w: %d keys, at most %d", ErrInvalidConfig, len(keys), MaxKeys)
	}
	s := &KeySet{keys: make(map[string]Key, len(keys))}
	var signing []string
	for i, k := range keys {
		name := fmt.Sprintf("key %d", i)
		if ValidKeyID(k.ID) {
			name = fmt.Sprintf("key %q", k.ID)
		}
		for _, problem := range k.validate() {
			errs = append(errs, fmt.Errorf("%w: %s: %s", ErrInvalidConfig, name, problem))
		}
		if _, dup := s.keys[k.ID]; dup {
			errs = append(errs, fmt.Errorf("%w: %s: duplicate key id", ErrInvalidConfig, name))
		}
		if k.State == KeySigning {
			signing = append(signing, k.ID)
		}
		k.Public = slices.Clone(k.Public)
		s.keys[k.ID] = k
	}
	if len(signing) != 1 {
		errs = append(errs, fmt.Errorf("%w: %d signing keys, need exactly one", ErrInvalidConfig, len(signing)))
	} else {
		s.signing = signing[0]
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return s, nil
}

// Lookup returns the key with the given kid. It performs no I/O: the set is in memory.
func (s *KeySet) Lookup(kid string) (Key, bool) {
	if s == nil {
		return Key{}, false
	}
	k, ok := s.keys[kid]
	k.Public = slices.Clone(k.Public)
	return k, ok
}

// lookupShared is Lookup without the defensive copy, for the verifier's hot path; the
// verifier never mutates the key.
func (s *KeySet) lookupShared(kid string) (Key, bool) {
	k, ok := s.keys[kid]
	return k, ok
}

// SigningKey returns the set's signing key.
func (s *KeySet) SigningKey() Key {
	k, _ := s.Lookup(s.signing)
	return k
}

// Keys returns copies of the keys, ordered by kid.
func (s *KeySet) Keys() []Key {
	out := make([]Key, 0, len(s.keys))
	for _, k := range s.keys {
		k.Public = slices.Clone(k.Public)
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b Key) int { return strings.Compare(a.ID, b.ID) })
	return out
}
