package grant

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/execplane/execplane/pkg/ident"
)

func TestNewSignerRefusesUnsafeConfig(t *testing.T) {
	good := SignerConfig{KeyID: testKeyID, PrivateKey: ourKey, Issuer: testIssuer, Audience: testAudience, Lifetime: testLifetime}
	mismatched := slices.Clone(ourKey)
	copy(mismatched[ed25519.SeedSize:], publicOf(attackerKey))
	tests := []struct {
		name   string
		mutate func(*SignerConfig)
	}{
		{"empty kid", func(c *SignerConfig) { c.KeyID = "" }},
		{"path kid", func(c *SignerConfig) { c.KeyID = "../keys/k1" }},
		{"NUL kid", func(c *SignerConfig) { c.KeyID = "k1\x00" }},
		{"long kid", func(c *SignerConfig) { c.KeyID = strings.Repeat("k", MaxKeyIDBytes+1) }},
		{"no key", func(c *SignerConfig) { c.PrivateKey = nil }},
		{"seed only", func(c *SignerConfig) { c.PrivateKey = ourKey.Seed() }},
		{"too long key", func(c *SignerConfig) { c.PrivateKey = append(slices.Clone(ourKey), 0) }},
		{"public half of another key", func(c *SignerConfig) { c.PrivateKey = mismatched }},
		{"empty issuer", func(c *SignerConfig) { c.Issuer = "" }},
		{"issuer with quote", func(c *SignerConfig) { c.Issuer = `a"b` }},
		{"long issuer", func(c *SignerConfig) { c.Issuer = strings.Repeat("i", MaxIssuerBytes+1) }},
		{"empty audience", func(c *SignerConfig) { c.Audience = "" }},
		{"audience with space", func(c *SignerConfig) { c.Audience = "exec plane" }},
		{"zero lifetime", func(c *SignerConfig) { c.Lifetime = 0 }},
		{"negative lifetime", func(c *SignerConfig) { c.Lifetime = -time.Minute }},
		{"lifetime below minimum", func(c *SignerConfig) { c.Lifetime = MinLifetime - time.Second }},
		{"lifetime above ceiling", func(c *SignerConfig) { c.Lifetime = MaxLifetime + time.Second }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := good
			tt.mutate(&cfg)
			s, err := NewSigner(cfg)
			if !errors.Is(err, ErrInvalidConfig) || s != nil {
				t.Fatalf("want ErrInvalidConfig, got %v", err)
			}
			if strings.Contains(err.Error(), string(ourKey)) || strings.Contains(err.Error(), fmt.Sprint(ourKey)) {
				t.Fatalf("error quotes the key: %v", err)
			}
		})
	}
	t.Run("every problem at once", func(t *testing.T) {
		_, err := NewSigner(SignerConfig{})
		if n := len(err.(interface{ Unwrap() []error }).Unwrap()); n != 5 {
			t.Fatalf("want 5 problems, got %d: %v", n, err)
		}
	})
	t.Run("boundaries accepted", func(t *testing.T) {
		for _, l := range []time.Duration{MinLifetime, MaxLifetime} {
			cfg := good
			cfg.Lifetime = l
			if _, err := NewSigner(cfg); err != nil {
				t.Fatalf("lifetime %s: %v", l, err)
			}
		}
	})
}

func TestSignerRoundTrip(t *testing.T) {
	f := newFixture(t)
	env, err := f.signer.SignEnvironment(testEnvBinding())
	if err != nil {
		t.Fatal(err)
	}
	run, err := f.signer.SignRun(testRunBinding())
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []Issued{env, run} {
		if want := t0.Add(testLifetime); !g.ExpiresAt.Equal(want) {
			t.Errorf("ExpiresAt = %v, want %v", g.ExpiresAt, want)
		}
		if g.KeyID != testKeyID || g.ID == "" {
			t.Errorf("KeyID %q, ID %q", g.KeyID, g.ID)
		}
	}
	got, err := f.verifier.VerifyEnvironment(env.Token, testEnvBinding())
	if err != nil {
		t.Fatalf("VerifyEnvironment: %v", err)
	}
	want := Verified{Purpose: PurposeEnvironment, Binding: RunBinding{EnvironmentBinding: testEnvBinding()},
		KeyID: testKeyID, ID: env.ID, IssuedAt: t0, ExpiresAt: env.ExpiresAt}
	if !verifiedEqual(got, want) {
		t.Errorf("VerifyEnvironment = %+v, want %+v", got, want)
	}
	got, err = f.verifier.VerifyRun(run.Token, testRunBinding())
	if err != nil {
		t.Fatalf("VerifyRun: %v", err)
	}
	want = Verified{Purpose: PurposeRun, Binding: testRunBinding(), KeyID: testKeyID, ID: run.ID, IssuedAt: t0, ExpiresAt: run.ExpiresAt}
	if !verifiedEqual(got, want) {
		t.Errorf("VerifyRun = %+v, want %+v", got, want)
	}
}

func verifiedEqual(a, b Verified) bool {
	return a.Purpose == b.Purpose && a.Binding == b.Binding && a.KeyID == b.KeyID && a.ID == b.ID &&
		a.IssuedAt.Equal(b.IssuedAt) && a.ExpiresAt.Equal(b.ExpiresAt)
}

func TestSubSecondClockAndLifetime(t *testing.T) {
	f := newFixture(t)
	f.clock.now = t0.Add(700 * time.Millisecond)
	s := mustSigner(t, SignerConfig{KeyID: testKeyID, PrivateKey: ourKey, Issuer: testIssuer, Audience: testAudience,
		Lifetime: testLifetime + 900*time.Millisecond, Now: f.clock.Now})
	g, err := s.SignRun(testRunBinding())
	if err != nil {
		t.Fatal(err)
	}
	if want := t0.Add(testLifetime); !g.ExpiresAt.Equal(want) {
		t.Fatalf("ExpiresAt = %v, want %v (whole seconds, never later than asked)", g.ExpiresAt, want)
	}
	if _, err := f.verifier.VerifyRun(g.Token, testRunBinding()); err != nil {
		t.Fatal(err)
	}
}

func TestTokenLayout(t *testing.T) {
	f := newFixture(t)
	token := f.signRun(t)
	parts := strings.Split(token, ".")
	var header map[string]any
	var payload map[string]any
	for i, dst := range []*map[string]any{&header, &payload} {
		raw, err := base64.RawURLEncoding.DecodeString(parts[i])
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, dst); err != nil {
			t.Fatal(err)
		}
	}
	if header["alg"] != "EdDSA" || header["kid"] != testKeyID {
		t.Errorf("header %v", header)
	}
	for _, name := range []string{"iss", "aud", "exp", "nbf", "iat", "jti", "purpose", "client_hash", "owner_hash",
		"binding_id", "env_name", "env_uid", "grant_generation", "epoch", "run_id", "claim_id"} {
		if _, ok := payload[name]; !ok {
			t.Errorf("payload lacks %s", name)
		}
	}
	if strings.Contains(string(mustJSON(t, payload)), testEnvBinding().Client) {
		t.Error("the payload carries the client URI; it must carry its hash")
	}
	env := f.signEnv(t)
	raw, _ := base64.RawURLEncoding.DecodeString(strings.Split(env, ".")[1])
	for _, name := range []string{`"epoch"`, `"run_id"`, `"claim_id"`} {
		if strings.Contains(string(raw), name) {
			t.Errorf("environment grant carries %s", name)
		}
	}
}

func TestSignRefusesInvalidBinding(t *testing.T) {
	f := newFixture(t)
	tests := []struct {
		name   string
		mutate func(*RunBinding)
	}{
		{"empty client", func(b *RunBinding) { b.Client = "" }},
		{"client with NUL", func(b *RunBinding) { b.Client = "spiffe://x/\x00" }},
		{"client too long", func(b *RunBinding) { b.Client = strings.Repeat("c", MaxClientBytes+1) }},
		{"owner hash uppercase", func(b *RunBinding) { b.OwnerHash = strings.ToUpper(b.OwnerHash) }},
		{"owner hash short", func(b *RunBinding) { b.OwnerHash = b.OwnerHash[:63] }},
		{"empty binding", func(b *RunBinding) { b.BindingID = "" }},
		{"binding starts with dot", func(b *RunBinding) { b.BindingID = ".x" }},
		{"binding with slash", func(b *RunBinding) { b.BindingID = "a/b" }},
		{"binding too long", func(b *RunBinding) { b.BindingID = strings.Repeat("b", MaxIdentifierBytes+1) }},
		{"environment name uppercase", func(b *RunBinding) { b.Environment.Name = "Env" }},
		{"environment name trailing dash", func(b *RunBinding) { b.Environment.Name = "env-" }},
		{"environment name too long", func(b *RunBinding) { b.Environment.Name = strings.Repeat("e", 64) }},
		{"empty uid", func(b *RunBinding) { b.Environment.UID = "" }},
		{"uid not canonical", func(b *RunBinding) { b.Environment.UID = strings.ReplaceAll(b.Environment.UID, "-", "x") }},
		{"empty run", func(b *RunBinding) { b.RunID = "" }},
		{"empty claim", func(b *RunBinding) { b.ClaimID = "" }},
		{"claim with quote", func(b *RunBinding) { b.ClaimID = `c"` }},
		{"claim too long", func(b *RunBinding) { b.ClaimID = strings.Repeat("c", MaxClaimIDBytes+1) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := testRunBinding()
			tt.mutate(&b)
			if _, err := f.signer.SignRun(b); !errors.Is(err, ErrInvalidInput) {
				t.Fatalf("SignRun: want ErrInvalidInput, got %v", err)
			}
			if err := b.EnvironmentBinding.Validate(); err != nil {
				if _, err := f.signer.SignEnvironment(b.EnvironmentBinding); !errors.Is(err, ErrInvalidInput) {
					t.Fatalf("SignEnvironment: want ErrInvalidInput, got %v", err)
				}
			}
		})
	}
}

// TestMaximalGrantFits signs a run grant with every input at its bound and checks that it
// fits in MaxTokenBytes, so the signer's size check can never fire on valid input.
func TestMaximalGrantFits(t *testing.T) {
	c := &clock{now: time.Unix(maxUnixSeconds-int64(MaxLifetime/time.Second), 0)} // the widest dates
	long := func(n int) string { return strings.Repeat("w", n) }
	s := mustSigner(t, SignerConfig{KeyID: long(MaxKeyIDBytes), PrivateKey: ourKey, Issuer: long(MaxIssuerBytes),
		Audience: long(MaxIssuerBytes), Lifetime: MaxLifetime, Now: c.Now})
	b := RunBinding{
		EnvironmentBinding: EnvironmentBinding{
			Client:          long(MaxClientBytes),
			OwnerHash:       strings.Repeat("f", HashHexBytes),
			BindingID:       long(MaxIdentifierBytes),
			Environment:     ident.EnvironmentRef{Name: long(MaxEnvironmentNameBytes), UID: "ffffffff-ffff-ffff-ffff-ffffffffffff"},
			GrantGeneration: ^uint64(0),
		},
		Epoch:   ^uint64(0),
		RunID:   long(MaxIdentifierBytes),
		ClaimID: long(MaxClaimIDBytes),
	}
	g, err := s.SignRun(b)
	if err != nil {
		t.Fatalf("SignRun: %v", err)
	}
	t.Logf("maximal run grant: %d bytes of %d", len(g.Token), MaxTokenBytes)
	if len(g.Token) > MaxTokenBytes*3/4 {
		t.Fatalf("maximal grant is %d bytes; keep a quarter of MaxTokenBytes spare", len(g.Token))
	}
	keys := mustKeySet(t, Key{ID: long(MaxKeyIDBytes), Public: publicOf(ourKey), State: KeySigning, VerifyFrom: c.now.Add(-time.Hour)})
	v := mustVerifier(t, VerifierConfig{Issuer: long(MaxIssuerBytes), Audience: long(MaxIssuerBytes), Keys: keys, Now: c.Now})
	if _, err := v.VerifyRun(g.Token, b); err != nil {
		t.Fatalf("VerifyRun: %v", err)
	}
}

func TestIssuedRedactsToken(t *testing.T) {
	f := newFixture(t)
	g, err := f.signer.SignRun(testRunBinding())
	if err != nil {
		t.Fatal(err)
	}
	holder := struct{ Grant Issued }{g}
	for _, format := range []string{"%v", "%+v", "%#v", "%s", "%q"} {
		for _, v := range []any{g, &g, holder} {
			if out := fmt.Sprintf(format, v); strings.Contains(out, g.Token) || strings.Contains(out, strings.Split(g.Token, ".")[2]) {
				t.Errorf("%s of %T prints the token: %s", format, v, out)
			}
		}
	}
}

func TestTokenIDsAreUnique(t *testing.T) {
	f := newFixture(t)
	seen := map[string]bool{}
	for range 1000 {
		g, err := f.signer.SignEnvironment(testEnvBinding())
		if err != nil {
			t.Fatal(err)
		}
		if seen[g.ID] {
			t.Fatalf("jti %q issued twice", g.ID)
		}
		seen[g.ID] = true
	}
}

func TestZeroValuesRefuse(t *testing.T) {
	var s *Signer
	if _, err := s.SignRun(testRunBinding()); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("nil signer: %v", err)
	}
	if _, err := (&Signer{}).SignEnvironment(testEnvBinding()); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("zero signer: %v", err)
	}
	f := newFixture(t)
	token := f.signRun(t)
	if _, err := (&Verifier{}).VerifyRun(token, testRunBinding()); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("zero verifier: %v", err)
	}
	if _, err := f.verifier.VerifyRunFunc(token, nil); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("nil expectation: %v", err)
	}
}

func TestSignerKeepsItsOwnCopyOfTheKey(t *testing.T) {
	key := slices.Clone(ourKey)
	c := &clock{now: t0}
	s := mustSigner(t, SignerConfig{KeyID: testKeyID, PrivateKey: key, Issuer: testIssuer, Audience: testAudience, Lifetime: testLifetime, Now: c.Now})
	clear(key)
	if !s.PublicKey().Equal(publicOf(ourKey)) || s.KeyID() != testKeyID {
		t.Fatal("signer follows the caller's key buffer")
	}
	g, err := s.SignRun(testRunBinding())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newFixture(t).verifier.VerifyRun(g.Token, testRunBinding()); err != nil {
		t.Fatal(err)
	}
}
