package security

import (
	"errors"
	"fmt"
	"time"

	"github.com/execplane/execplane/pkg/grant"
)

// CheckTransition reports whether next may replace prev as the current bundle at now, as a
// pure function of the two (the in-process part of the reload rules; the high-water mark
// shared by the replicas applies the same rules across restarts and replicas):
//   - a lower generation is a rollback: refused;
//   - the same generation must carry the same full-bundle digest (no drift): an equal
//     bundle is accepted as no change;
//   - a higher generation must rotate the grant keys safely (grant.CheckRotation).
//
// A nil prev is the first bundle. Errors wrap ErrUnsafeTransition.
func CheckTransition(prev, next *Bundle, now time.Time) error {
	switch {
	case next == nil:
		return fmt.Errorf("%w: no bundle", ErrUnsafeTransition)
	case prev == nil:
		return nil
	case next.generation < prev.generation:
		return fmt.Errorf("%w: generation %d is lower than the current %d (rollback)", ErrUnsafeTransition, next.generation, prev.generation)
	case next.generation == prev.generation && next.digest != prev.digest:
		return fmt.Errorf("%w: generation %d with different content (raise the generation on every change)", ErrUnsafeTransition, next.generation)
	case next.generation == prev.generation:
		return nil
	}
	if err := grant.CheckRotation(prev.keys, next.keys, now); err != nil {
		return fmt.Errorf("%w: %w", ErrUnsafeTransition, err)
	}
	return nil
}

// ValidAt re-checks the time-dependent rules LoadBundle checked at load time: the server
// certificate is valid, a client CA is valid, and the signing key signs. A bundle that
// fails it has run out and must not serve (fail closed). Errors wrap ErrInvalidBundle.
func (b *Bundle) ValidAt(now time.Time) error {
	var errs []error
	if leaf := b.serverCert.Leaf; leaf == nil || !validAt(leaf, now) {
		errs = append(errs, fmt.Errorf("%w: the server certificate is not valid now", ErrInvalidBundle))
	}
	current := false
	for _, c := range b.clientCAs {
		current = current || validAt(c, now)
	}
	if !current {
		errs = append(errs, fmt.Errorf("%w: no client CA certificate is valid now", ErrInvalidBundle))
	}
	if b.keys == nil || !b.keys.SigningKey().Signs(now) {
		errs = append(errs, fmt.Errorf("%w: the signing key does not sign now", ErrInvalidBundle))
	}
	return errors.Join(errs...)
}

// ExpiresAt is when the bundle stops being valid at the latest: the end of the server
// certificate or of the last client CA, whichever comes first.
func (b *Bundle) ExpiresAt() time.Time {
	var lastCA time.Time
	for _, c := range b.clientCAs {
		if c.NotAfter.After(lastCA) {
			lastCA = c.NotAfter
		}
	}
	if leaf := b.serverCert.Leaf; leaf != nil && leaf.NotAfter.Before(lastCA) {
		return leaf.NotAfter
	}
	return lastCA
}
