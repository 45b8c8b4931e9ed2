package grant

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/execplane/execplane/pkg/ident"
)

// Shared fixtures. Tokens that the library would refuse to produce (alg none, hostile kids,
// missing claims) are built by hand from base64url JSON with rawToken.

const (
	testIssuer   = "execplane-gateway"
	testAudience = "execplane"
	testKeyID    = "grant-2030-01"
	testLifetime = 5 * time.Minute
)

// t0 is the fixed "now" of every test; tokens are issued at t0 unless a test says otherwise.
var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// clock is a settable time source for signers and verifiers.
type clock struct{ now time.Time }

func (c *clock) Now() time.Time { return c.now }

// testKey returns a deterministic Ed25519 key; different n, different key.
func testKey(n byte) ed25519.PrivateKey {
	seed := make([]byte, ed25519.SeedSize)
	for i := range seed {
		seed[i] = n
	}
	return ed25519.NewKeyFromSeed(seed)
}

func publicOf(k ed25519.PrivateKey) ed25519.PublicKey { return k.Public().(ed25519.PublicKey) }

var (
	ourKey      = testKey(1)
	attackerKey = testKey(66)
)

func testEnvBinding() EnvironmentBinding {
	return EnvironmentBinding{
		Client:          "spiffe://example.org/agent-orchestrator",
		OwnerHash:       strings.Repeat("ab", 32),
		BindingID:       "conversation:42",
		Environment:     ident.EnvironmentRef{Name: "env-x", UID: "0b6f5c1e-7d9a-4c1b-9e2f-3a4b5c6d7e8f"},
		GrantGeneration: 3,
	}
}

func testRunBinding() RunBinding {
	return RunBinding{
		EnvironmentBinding: testEnvBinding(),
		Epoch:              7,
		RunID:              "run-1",
		ClaimID:            "claim-abc",
	}
}

// fixture is a signer and a verifier that trust each other, on one clock.
type fixture struct {
	clock    *clock
	signer   *Signer
	verifier *Verifier
	keys     *KeySet
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	c := &clock{now: t0}
	keys := mustKeySet(t, Key{ID: testKeyID, Public: publicOf(ourKey), State: KeySigning, VerifyFrom: t0.Add(-time.Hour)})
	return &fixture{
		clock:    c,
		keys:     keys,
		signer:   mustSigner(t, SignerConfig{KeyID: testKeyID, PrivateKey: ourKey, Issuer: testIssuer, Audience: testAudience, Lifetime: testLifetime, Now: c.Now}),
		verifier: mustVerifier(t, VerifierConfig{Issuer: testIssuer, Audience: testAudience, Keys: keys, Now: c.Now}),
	}
}

func mustKeySet(t testing.TB, keys ...Key) *KeySet {
	t.Helper()
	s, err := NewKeySet(keys...)
	if err != nil {
		t.Fatalf("NewKeySet: %v", err)
	}
	return s
}

func mustSigner(t testing.TB, cfg SignerConfig) *Signer {
	t.Helper()
	s, err := NewSigner(cfg)
	if err != nil {
		t.Fatalf("NewSigner: %v", err)
	}
	return s
}

func mustVerifier(t testing.TB, cfg VerifierConfig) *Verifier {
	t.Helper()
	v, err := NewVerifier(cfg)
	if err != nil {
		t.Fatalf("NewVerifier: %v", err)
	}
	return v
}

func (f *fixture) signEnv(t testing.TB) string {
	t.Helper()
	g, err := f.signer.SignEnvironment(testEnvBinding())
	if err != nil {
		t.Fatalf("SignEnvironment: %v", err)
	}
	return g.Token
}

func (f *fixture) signRun(t testing.TB) string {
	t.Helper()
	g, err := f.signer.SignRun(testRunBinding())
	if err != nil {
		t.Fatalf("SignRun: %v", err)
	}
	return g.Token
}

// b64 is unpadded base64url, the JWS segment encoding.
func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("json: %v", err)
	}
	return b
}

// ourHeader is the header our signer writes.
func ourHeader() map[string]any {
	return map[string]any{"alg": "EdDSA", "typ": "JWT", "kid": testKeyID}
}

// runClaims is the payload our signer writes for testRunBinding at t0, as a map a test can
// corrupt.
func runClaims() map[string]any {
	b := testRunBinding()
	return map[string]any{
		"iss":              testIssuer,
		"aud":              []string{testAudience},
		"iat":              t0.Unix(),
		"nbf":              t0.Unix(),
		"exp":              t0.Add(testLifetime).Unix(),
		"jti":              "hand-made",
		"purpose":          string(PurposeRun),
		"client_hash":      ident.ClientHash(b.Client),
		"owner_hash":       b.OwnerHash,
		"binding_id":       b.BindingID,
		"env_name":         b.Environment.Name,
		"env_uid":          b.Environment.UID,
		"grant_generation": b.GrantGeneration,
		"epoch":            b.Epoch,
		"run_id":           b.RunID,
		"claim_id":         b.ClaimID,
	}
}

// rawToken assembles header.payload.signature from JSON-encodable parts; sign computes the
// signature over the signing input (nil sign: an empty signature segment).
func rawToken(t testing.TB, header, payload any, sign func(input []byte) []byte) string {
	t.Helper()
	input := b64(mustJSON(t, header)) + "." + b64(mustJSON(t, payload))
	var sig []byte
	if sign != nil {
		sig = sign([]byte(input))
	}
	return input + "." + b64(sig)
}

// signWith signs a JWS input with an Ed25519 key.
func signWith(key ed25519.PrivateKey) func([]byte) []byte {
	return func(input []byte) []byte { return ed25519.Sign(key, input) }
}

// expectErr checks that err matches want with errors.Is and that its message holds no
// piece of the token.
func expectErr(t *testing.T, token string, err, want error) {
	t.Helper()
	if want == nil {
		if err != nil {
			t.Fatalf("want success, got %v", err)
		}
		return
	}
	if !errors.Is(err, want) {
		t.Fatalf("want %v, got %v", want, err)
	}
	assertNoTokenIn(t, token, err.Error())
}

// assertNoTokenIn fails when msg contains any segment (or 16-byte slice) of token.
func assertNoTokenIn(t *testing.T, token, msg string) {
	t.Helper()
	for _, seg := range strings.Split(token, ".") {
		for i := 0; i+16 <= len(seg); i += 16 {
			if strings.Contains(msg, seg[i:i+16]) {
				t.Fatalf("error message quotes the token: %q", msg)
			}
		}
	}
}
