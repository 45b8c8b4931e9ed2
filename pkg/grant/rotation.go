package grant

import (
	"errors"
	"fmt"
	"time"
)

// CheckRotation reports whether replacing the key set prev by next at now is safe, as a pure
// function of the two sets and the clock, so that the security-material loader can refuse an
// unsafe generation before any gateway uses it. A nil prev is the first deployment. Every
// problem is reported at once, each wrapping ErrUnsafeRotation.
//
// A rotation from key A to key B takes three generations, each one checked against the one
// before:
//
//  1. publish:  A signing;             B verify-only, VerifyFrom = t1
//  2. switch:   B signing (t2 >= t1 + MaxReloadDelay); A retired, VerifyUntil >= t2 + RetirementDelay
//  3. drop:     B signing (t3 >= A's VerifyUntil)
//
// The rules:
//   - next's signing key verifies at now;
//   - a kid present in both sets names the same public key and the same VerifyFrom: a kid
//     is never reused for another key;
//   - a key new in next enters as verify-only (published before it signs);
//   - a key that becomes the signing key was verify-only in prev and was published at least
//     MaxReloadDelay ago, so every gateway, even one that reloads late, verifies its grants;
//   - the previous signing key, when it stops signing, is retired with a VerifyUntil of at
//     least EarliestRetirement(now), so that every grant it signed (or that a lagging
//     gateway still signs) verifies until it expires;
//   - a retired key never signs or becomes verify-only again, and while it still verifies
//     its VerifyUntil is neither removed nor brought forward.
func CheckRotation(prev, next *KeySet, now time.Time) error {
	if next == nil {
		return fmt.Errorf("%w: no next key set", ErrUnsafeRotation)
	}
	var errs []error
	unsafe := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrUnsafeRotation}, args...)...))
	}

	signing := next.keys[next.signing]
	if !signing.Verifies(now) {
		unsafe("signing key %q does not verify now", signing.ID)
	}
	if prev == nil {
		return errors.Join(errs...)
	}

	for id, n := range next.keys {
		p, existed := prev.keys[id]
		if !existed {
			if n.State != KeyVerifyOnly {
				unsafe("new key %q must be published verify-only first, not %s", id, n.State)
			}
			continue
		}
		if !p.Public.Equal(n.Public) {
			unsafe("key id %q reused for another public key", id)
		}
		if !p.VerifyFrom.Equal(n.VerifyFrom) {
			unsafe("key %q changed its verify-from", id)
		}
		if p.State == KeyRetired && n.State != KeyRetired {
			unsafe("retired key %q cannot become %s again", id, n.State)
		}
	}

	// The key that starts signing.
	if next.signing != prev.signing {
		p, published := prev.keys[next.signing]
		switch {
		case !published:
			// Reported above as a new key that is not verify-only.
		case p.State != KeyVerifyOnly:
			unsafe("key %q must be verify-only before it signs, not %s", p.ID, p.State)
		case !p.Verifies(now) || now.Before(p.VerifyFrom.Add(MaxReloadDelay)):
			unsafe("key %q must have been published for %s before it signs", p.ID, MaxReloadDelay)
		}
	}

	// The key that stops signing.
	if old := prev.keys[prev.signing]; next.signing != old.ID {
		n, kept := next.keys[old.ID]
		switch {
		case !kept:
			unsafe("previous signing key %q dropped; retire it until at least now+%s", old.ID, RetirementDelay)
		case n.State != KeyRetired:
			unsafe("previous signing key %q must be retired, not %s", old.ID, n.State)
		case n.VerifyUntil.Before(EarliestRetirement(now)):
			unsafe("previous signing key %q retired too early; verify until at least now+%s", old.ID, RetirementDelay)
		}
	}

	// Keys already retired: kept, and not shortened, while they verify.
	for id, p := range prev.keys {
		if p.State != KeyRetired || !now.Before(p.VerifyUntil) {
			continue
		}
		n, kept := next.keys[id]
		switch {
		case !kept:
			unsafe("retired key %q dropped while it still verifies", id)
		case n.State == KeyRetired && n.VerifyUntil.Before(p.VerifyUntil):
			unsafe("retired key %q: verify-until brought forward", id)
		}
	}
	return errors.Join(errs...)
}
