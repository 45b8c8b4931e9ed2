package security

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/execplane/execplane/pkg/grant"
)

// CheckTransition reports whether next may replace prev as the current bundle at now, as a
// pure function of the two (the in-process part of the reload rules; the high-water mark
// shared by the replicas applies the same rules across restarts and replicas):
//   - a lower generation is a rollback: refused;
//   - the same generation must carry the same digest (no drift): an identical bundle is
//     accepted as no change; the digest leaves out a renewable server certificate and key
//     (serverCertificate.renewal), which may change within a generation, but only to a
//     newer leaf: its notBefore strictly later than the current one's (an older leaf is a
//     rollback; another leaf of the same second is refused, saying how to get past it).
//     That the new leaf chains to the pinned issuers, has exactly the manifest's names,
//     matches its key and is valid now was checked by LoadBundle, or next would not exist;
//   - a higher generation must rotate the grant keys safely (grant.CheckRotation), and
//     when both server certificates are renewable the new one is the same, newer, or
//     another one of the same second (the generation bump chooses it).
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
		return checkLeafOrder(prev, next)
	}
	if err := grant.CheckRotation(prev.keys, next.keys, now); err != nil {
		return fmt.Errorf("%w: %w", ErrUnsafeTransition, err)
	}
	return checkLeafOrder(prev, next)
}

// checkLeafOrder refuses a renewable server certificate that may not follow the current one,
// by the rule the high-water mark applies to its record (highwater.Check): the same
// certificate, or one whose notBefore is strictly later, may follow it; another one issued
// in the same second (notBefore has one-second precision, and cert-manager can issue twice
// within one) only at a higher generation, the operator's deliberate choice; an older one
// never.
func checkLeafOrder(prev, next *Bundle) error {
	p, pok := prev.ServerLeaf()
	n, nok := next.ServerLeaf()
	switch {
	case !pok || !nok || n.Digest == p.Digest || n.NotBefore.After(p.NotBefore):
		return nil
	case n.NotBefore.Equal(p.NotBefore) && next.generation > prev.generation:
		return nil
	case n.NotBefore.Equal(p.NotBefore):
		return fmt.Errorf("%w: another server certificate was issued in the same second (%s) as the current one, "+
			"so it is neither newer nor older; renew the certificate again (a later notBefore), or raise the manifest "+
			"generation above %d to accept this one", ErrUnsafeTransition, n.NotBefore.UTC().Format(time.RFC3339), prev.generation)
	}
	return fmt.Errorf("%w: a server certificate issued %s, before the current one issued %s (rollback; a renewal is newer)",
		ErrUnsafeTransition, n.NotBefore.UTC().Format(time.RFC3339), p.NotBefore.UTC().Format(time.RFC3339))
}

// ValidAt re-checks the time-dependent rules LoadBundle checked at load time: the server
// certificate is valid (a renewable one with a chain to its pinned issuers), a client CA is
// valid, and the signing key signs. A bundle that fails it has run out and must not serve
// (fail closed). It builds no chain: every handshake asks. Errors wrap ErrInvalidBundle.
func (b *Bundle) ValidAt(now time.Time) error {
	var errs []error
	if leaf := b.serverCert.Leaf; leaf == nil || !validAt(leaf, now) {
		errs = append(errs, fmt.Errorf("%w: the server certificate is not valid now", ErrInvalidBundle))
	} else if b.renewable && !slices.ContainsFunc(b.leafWindows, func(w validityWindow) bool { return w.contains(now) }) {
		errs = append(errs, fmt.Errorf("%w: the server certificate's chain to its issuers is not valid now", ErrInvalidBundle))
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
// certificate (for a renewable one, of its longest-lived chain to its issuers) or of the
// last client CA, whichever comes first.
func (b *Bundle) ExpiresAt() time.Time {
	var lastCA time.Time
	for _, c := range b.clientCAs {
		if c.NotAfter.After(lastCA) {
			lastCA = c.NotAfter
		}
	}
	leaf := b.serverCert.Leaf
	if leaf == nil {
		return lastCA
	}
	leafEnd := leaf.NotAfter
	if b.renewable {
		chainEnd := time.Time{}
		for _, w := range b.leafWindows {
			if w.until.After(chainEnd) {
				chainEnd = w.until
			}
		}
		leafEnd = chainEnd
	}
	if leafEnd.Before(lastCA) {
		return leafEnd
	}
	return lastCA
}
