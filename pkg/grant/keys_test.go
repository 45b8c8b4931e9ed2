package grant

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func signingKey(id string, key []byte, from time.Time) Key {
	return Key{ID: id, Public: publicOf(key), State: KeySigning, VerifyFrom: from}
}

func TestNewKeySetRefusesInvalid(t *testing.T) {
	from := t0.Add(-time.Hour)
	good := signingKey("a", ourKey, from)
	tests := []struct {
		name string
		keys []Key
	}{
		{"no keys", nil},
		{"no signing key", []Key{{ID: "a", Public: publicOf(ourKey), State: KeyVerifyOnly, VerifyFrom: from}}},
		{"two signing keys", []Key{good, signingKey("b", attackerKey, from)}},
		{"duplicate kid", []Key{good, {ID: "a", Public: publicOf(attackerKey), State: KeyVerifyOnly, VerifyFrom: from}}},
		{"hostile kid", []Key{signingKey("../a", ourKey, from)}},
		{"empty kid", []Key{signingKey("", ourKey, from)}},
		{"short public key", []Key{{ID: "a", Public: publicOf(ourKey)[:31], State: KeySigning, VerifyFrom: from}}},
		{"private key as public", []Key{{ID: "a", Public: []byte(ourKey), State: KeySigning, VerifyFrom: from}}},
		{"no verify-from", []Key{{ID: "a", Public: publicOf(ourKey), State: KeySigning}}},
		{"unknown state", []Key{good, {ID: "b", Public: publicOf(attackerKey), State: "active", VerifyFrom: from}}},
		{"signing key with an end", []Key{{ID: "a", Public: publicOf(ourKey), State: KeySigning, VerifyFrom: from, VerifyUntil: t0}}},
		{"verify-only key with an end", []Key{good, {ID: "b", Public: publicOf(attackerKey), State: KeyVerifyOnly, VerifyFrom: from, VerifyUntil: t0}}},
		{"retired key without an end", []Key{good, {ID: "b", Public: publicOf(attackerKey), State: KeyRetired, VerifyFrom: from}}},
		{"retired key ending before it starts", []Key{good, {ID: "b", Public: publicOf(attackerKey), State: KeyRetired, VerifyFrom: t0, VerifyUntil: from}}},
		{"too many keys", manyKeys(MaxKeys + 1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if s, err := NewKeySet(tt.keys...); !errors.Is(err, ErrInvalidConfig) || s != nil {
				t.Fatalf("want ErrInvalidConfig, got %v", err)
			}
		})
	}
	if _, err := NewKeySet(manyKeys(MaxKeys)...); err != nil {
		t.Fatalf("%d keys: %v", MaxKeys, err)
	}
}

func manyKeys(n int) []Key {
	keys := []Key{signingKey("k0", ourKey, t0)}
	for i := 1; i < n; i++ {
		keys = append(keys, Key{ID: fmt.Sprintf("k%d", i), Public: publicOf(testKey(byte(i + 1))), State: KeyVerifyOnly, VerifyFrom: t0})
	}
	return keys
}

func TestKeyWindows(t *testing.T) {
	from, until := t0, t0.Add(time.Hour)
	retired := Key{ID: "r", State: KeyRetired, VerifyFrom: from, VerifyUntil: until}
	open := Key{ID: "s", State: KeySigning, VerifyFrom: from}
	verifyOnly := Key{ID: "v", State: KeyVerifyOnly, VerifyFrom: from}
	tests := []struct {
		name            string
		key             Key
		now             time.Time
		verifies, signs bool
	}{
		{"retired before its window", retired, from.Add(-time.Nanosecond), false, false},
		{"retired at its start", retired, from, true, false},
		{"retired just before its end", retired, until.Add(-time.Nanosecond), true, false},
		{"retired at its end", retired, until, false, false},
		{"signing before publication", open, from.Add(-time.Nanosecond), false, false},
		{"signing", open, from, true, true},
		{"signing a century later", open, from.AddDate(100, 0, 0), true, true},
		{"verify-only", verifyOnly, from, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.key.Verifies(tt.now); got != tt.verifies {
				t.Errorf("Verifies = %v", got)
			}
			if got := tt.key.Signs(tt.now); got != tt.signs {
				t.Errorf("Signs = %v", got)
			}
		})
	}
	if got, want := EarliestRetirement(t0), t0.Add(MaxLifetime+Leeway+MaxReloadDelay); !got.Equal(want) {
		t.Errorf("EarliestRetirement = %v, want %v", got, want)
	}
}

func TestKeySetIsImmutable(t *testing.T) {
	pub := publicOf(ourKey)
	buf := append([]byte(nil), pub...)
	s := mustKeySet(t, Key{ID: "a", Public: buf, State: KeySigning, VerifyFrom: t0})
	clear(buf)
	k, _ := s.Lookup("a")
	if !k.Public.Equal(pub) {
		t.Fatal("the set follows the caller's buffer")
	}
	clear(k.Public)
	for _, k := range s.Keys() {
		if !k.Public.Equal(pub) {
			t.Fatal("Lookup hands out the set's own buffer")
		}
		clear(k.Public)
	}
	if k := s.SigningKey(); k.ID != "a" || !k.Public.Equal(pub) {
		t.Fatalf("SigningKey = %+v", k)
	}
	if _, ok := s.Lookup("b"); ok {
		t.Fatal("found an absent key")
	}
	var nilSet *KeySet
	if _, ok := nilSet.Lookup("a"); ok {
		t.Fatal("a nil set found a key")
	}
}

func TestValidKeyID(t *testing.T) {
	for kid, want := range map[string]bool{
		"a": true, "grant-2030_01.v2": true, strings.Repeat("k", MaxKeyIDBytes): true,
		"": false, strings.Repeat("k", MaxKeyIDBytes+1): false, "a/b": false, "..\\a": false,
		"a b": false, "a\x00": false, "ключ": false, "a:b": false, "a%2e": false,
	} {
		if got := ValidKeyID(kid); got != want {
			t.Errorf("ValidKeyID(%q) = %v", kid, got)
		}
	}
}

func TestNewVerifierRefusesUnsafeConfig(t *testing.T) {
	keys := mustKeySet(t, signingKey("a", ourKey, t0))
	good := VerifierConfig{Issuer: testIssuer, Audience: testAudience, Keys: keys}
	tests := []struct {
		name   string
		mutate func(*VerifierConfig)
	}{
		{"no issuer", func(c *VerifierConfig) { c.Issuer = "" }},
		{"no audience", func(c *VerifierConfig) { c.Audience = "" }},
		{"audience with quote", func(c *VerifierConfig) { c.Audience = `"` }},
		{"no keys", func(c *VerifierConfig) { c.Keys = nil }},
		{"zero key set", func(c *VerifierConfig) { c.Keys = &KeySet{} }},
		{"ceiling above MaxLifetime", func(c *VerifierConfig) { c.MaxLifetime = MaxLifetime + time.Second }},
		{"ceiling below MinLifetime", func(c *VerifierConfig) { c.MaxLifetime = time.Second }},
		{"negative ceiling", func(c *VerifierConfig) { c.MaxLifetime = -time.Minute }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := good
			tt.mutate(&cfg)
			if v, err := NewVerifier(cfg); !errors.Is(err, ErrInvalidConfig) || v != nil {
				t.Fatalf("want ErrInvalidConfig, got %v", err)
			}
		})
	}
	v := mustVerifier(t, good)
	if v.maxLifetime != MaxLifetime {
		t.Fatalf("default ceiling %s", v.maxLifetime)
	}
}
