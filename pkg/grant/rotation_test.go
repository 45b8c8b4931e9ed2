package grant

import (
	"errors"
	"testing"
	"time"
)

// Keys A (ours, signing first) and B (the next one) for the rotation tests.
var (
	keyA = ourKey
	keyB = testKey(2)
)

func TestCheckRotationRules(t *testing.T) {
	now := t0
	published := now.Add(-MaxReloadDelay) // B published long enough ago
	aSigning := Key{ID: "a", Public: publicOf(keyA), State: KeySigning, VerifyFrom: now.Add(-time.Hour)}
	aRetired := func(until time.Time) Key {
		k := aSigning
		k.State, k.VerifyUntil = KeyRetired, until
		return k
	}
	bVerifyOnly := Key{ID: "b", Public: publicOf(keyB), State: KeyVerifyOnly, VerifyFrom: published}
	bSigning := bVerifyOnly
	bSigning.State = KeySigning
	set := func(keys ...Key) *KeySet { return mustKeySet(t, keys...) }

	tests := []struct {
		name       string
		prev, next *KeySet
		now        time.Time
		safe       bool
	}{
		{"first deployment", nil, set(aSigning), now, true},
		{"first deployment, key not yet valid", nil, set(Key{ID: "a", Public: publicOf(keyA), State: KeySigning, VerifyFrom: now.Add(time.Minute)}), now, false},
		{"no change", set(aSigning), set(aSigning), now, true},
		{"publish B verify-only", set(aSigning), set(aSigning, bVerifyOnly), now, true},
		{"switch to B, retire A", set(aSigning, bVerifyOnly), set(bSigning, aRetired(EarliestRetirement(now))), now, true},
		{"switch to B, retire A with margin", set(aSigning, bVerifyOnly), set(bSigning, aRetired(now.Add(24*time.Hour))), now, true},
		{"drop A after its window", set(bSigning, aRetired(now)), set(bSigning), now, true},
		{"extend A's window", set(bSigning, aRetired(now.Add(time.Hour))), set(bSigning, aRetired(now.Add(2*time.Hour))), now, true},
		{"abandon a published key", set(aSigning, bVerifyOnly), set(aSigning), now, true},

		{"B signs without being published", set(aSigning), set(bSigning, aRetired(EarliestRetirement(now))), now, false},
		{"B signs too soon after publication", set(aSigning, bVerifyOnly), set(bSigning, aRetired(EarliestRetirement(now))), now.Add(-time.Second), false},
		{"A retired too early", set(aSigning, bVerifyOnly), set(bSigning, aRetired(EarliestRetirement(now).Add(-time.Second))), now, false},
		{"A dropped at the switch", set(aSigning, bVerifyOnly), set(bSigning), now, false},
		{"A demoted to verify-only", set(aSigning, bVerifyOnly), set(bSigning, Key{ID: "a", Public: publicOf(keyA), State: KeyVerifyOnly, VerifyFrom: aSigning.VerifyFrom}), now, false},
		{"A dropped while it still verifies", set(bSigning, aRetired(now.Add(time.Minute))), set(bSigning), now, false},
		{"A's window shortened", set(bSigning, aRetired(now.Add(time.Hour))), set(bSigning, aRetired(now.Add(time.Minute))), now, false},
		{"A brought back to signing", set(bSigning, aRetired(now.Add(time.Hour))), set(aSigning, Key{ID: "b", Public: publicOf(keyB), State: KeyRetired, VerifyFrom: published, VerifyUntil: EarliestRetirement(now)}), now, false},
		{"kid reused for another key", set(aSigning), set(Key{ID: "a", Public: publicOf(keyB), State: KeySigning, VerifyFrom: aSigning.VerifyFrom}), now, false},
		{"verify-from moved", set(aSigning, bVerifyOnly), set(aSigning, Key{ID: "b", Public: publicOf(keyB), State: KeyVerifyOnly, VerifyFrom: now.Add(-time.Hour)}), now, false},
		{"new key enters retired", set(aSigning), set(aSigning, Key{ID: "c", Public: publicOf(keyB), State: KeyRetired, VerifyFrom: now.Add(-time.Hour), VerifyUntil: now.Add(time.Hour)}), now, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckRotation(tt.prev, tt.next, tt.now)
			if tt.safe && err != nil {
				t.Fatalf("want safe, got %v", err)
			}
			if !tt.safe && !errors.Is(err, ErrUnsafeRotation) {
				t.Fatalf("want ErrUnsafeRotation, got %v", err)
			}
		})
	}
	if err := CheckRotation(set(aSigning), nil, now); !errors.Is(err, ErrUnsafeRotation) {
		t.Fatalf("nil next: %v", err)
	}
}

// TestRotationWindows runs a whole rotation from key A to key B on one clock: B is
// published verify-only, the signer switches to B once every gateway can verify it, and A
// is retired for exactly the longest grant lifetime (plus leeway and reload delay). Grants
// of A verify through the overlap and are refused once A's window has closed.
func TestRotationWindows(t *testing.T) {
	c := &clock{now: t0}
	verifier := func(keys *KeySet) *Verifier {
		return mustVerifier(t, VerifierConfig{Issuer: testIssuer, Audience: testAudience, Keys: keys, Now: c.Now})
	}
	signer := func(kid string, key []byte, lifetime time.Duration) *Signer {
		return mustSigner(t, SignerConfig{KeyID: kid, PrivateKey: key, Issuer: testIssuer, Audience: testAudience, Lifetime: lifetime, Now: c.Now})
	}
	verify := func(v *Verifier, token string) error {
		_, err := v.VerifyRun(token, testRunBinding())
		return err
	}
	sign := func(s *Signer) string {
		g, err := s.SignRun(testRunBinding())
		if err != nil {
			t.Fatal(err)
		}
		return g.Token
	}

	// Generation 1: A signs.
	aSigning := Key{ID: "a", Public: publicOf(keyA), State: KeySigning, VerifyFrom: t0}
	gen1 := mustKeySet(t, aSigning)
	if err := CheckRotation(nil, gen1, c.now); err != nil {
		t.Fatal(err)
	}
	signerA := signer("a", keyA, MaxLifetime) // the longest lifetime any grant can have
	v1 := verifier(gen1)

	// Generation 2 at t1: B published verify-only. Gateways still on generation 1 do not
	// know B, which is why nothing signs with it yet.
	c.now = t0.Add(time.Hour)
	t1 := c.now
	bPublished := Key{ID: "b", Public: publicOf(keyB), State: KeyVerifyOnly, VerifyFrom: t1}
	gen2 := mustKeySet(t, aSigning, bPublished)
	if err := CheckRotation(gen1, gen2, c.now); err != nil {
		t.Fatal(err)
	}
	v2 := verifier(gen2)
	early := sign(signer("b", keyB, MaxLifetime))
	if err := verify(v1, early); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("a B grant on a gateway that has not reloaded: %v", err)
	}
	if err := verify(v2, early); err != nil {
		t.Fatalf("a published key verifies: %v", err)
	}

	// Switching at once is refused: a lagging gateway may not have generation 2 yet.
	bSigning := bPublished
	bSigning.State = KeySigning
	if err := CheckRotation(gen2, mustKeySet(t, bSigning, retire(aSigning, EarliestRetirement(c.now))), c.now); !errors.Is(err, ErrUnsafeRotation) {
		t.Fatalf("switch right after publication: %v", err)
	}

	// Generation 3 at t2 = t1 + MaxReloadDelay: B signs, A retired until t2 + RetirementDelay.
	c.now = t1.Add(MaxReloadDelay)
	t2 := c.now
	lastOfA := sign(signerA) // a lagging gateway signs with A at the very moment of the switch
	aRetired := retire(aSigning, EarliestRetirement(t2))
	gen3 := mustKeySet(t, bSigning, aRetired)
	if err := CheckRotation(gen2, gen3, c.now); err != nil {
		t.Fatal(err)
	}
	v3 := verifier(gen3)
	signerB := signer("b", keyB, MaxLifetime)
	firstOfB := sign(signerB)
	for name, token := range map[string]string{"last A grant": lastOfA, "first B grant": firstOfB} {
		if err := verify(v3, token); err != nil {
			t.Fatalf("%s right after the switch: %v", name, err)
		}
	}
	// A gateway that has not reloaded yet signs with A for up to MaxReloadDelay more.
	c.now = t2.Add(MaxReloadDelay)
	laggard := sign(signerA)
	if err := verify(v3, laggard); err != nil {
		t.Fatalf("a lagging gateway's A grant: %v", err)
	}

	// Through the overlap every A grant verifies until it expires: a grant signed at the
	// switch expires on its own terms while A still verifies...
	c.now = t2.Add(MaxLifetime + Leeway)
	if err := verify(v3, lastOfA); !errors.Is(err, ErrExpired) {
		t.Fatalf("the last A grant after its exp: %v", err)
	}
	// ... and the laggard's, the latest any gateway can sign with A, verifies (leeway
	// included) up to the last instant of A's window: retirement cuts nothing short.
	c.now = t2.Add(MaxReloadDelay + MaxLifetime - time.Second)
	if err := verify(v3, laggard); err != nil {
		t.Fatalf("the laggard's A grant one second before it expires: %v", err)
	}
	c.now = aRetired.VerifyUntil.Add(-time.Nanosecond)
	if err := verify(v3, laggard); err != nil {
		t.Fatalf("the laggard's A grant at the end of A's window: %v", err)
	}

	// At A's VerifyUntil the key is gone, whatever the grant says (here: one signed by A
	// with a clock-skewed future iat that would otherwise still be inside its lifetime).
	c.now = aRetired.VerifyUntil
	if aRetired.Verifies(c.now) {
		t.Fatal("A verifies at its VerifyUntil")
	}
	skewed := rawToken(t, map[string]any{"alg": "EdDSA", "kid": "a"}, withTimes(runClaims(), c.now.Add(-time.Minute), MaxLifetime), signWith(keyA))
	if err := verify(v3, skewed); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("an A grant after A's window: %v", err)
	}
	if err := verify(v3, sign(signerB)); err != nil {
		t.Fatalf("B after A's retirement: %v", err)
	}

	// Generation 4: A dropped, which is only safe now.
	gen4 := mustKeySet(t, bSigning)
	if err := CheckRotation(gen3, gen4, c.now.Add(-time.Second)); !errors.Is(err, ErrUnsafeRotation) {
		t.Fatalf("dropping A a second early: %v", err)
	}
	if err := CheckRotation(gen3, gen4, c.now); err != nil {
		t.Fatal(err)
	}
}

func retire(k Key, until time.Time) Key {
	k.State, k.VerifyUntil = KeyRetired, until
	return k
}

// withTimes sets iat and nbf to issued and exp to issued + lifetime.
func withTimes(m map[string]any, issued time.Time, lifetime time.Duration) map[string]any {
	m["iat"], m["nbf"], m["exp"] = issued.Unix(), issued.Unix(), issued.Add(lifetime).Unix()
	return m
}
