package grant

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"
)

// The Grants cases of ADVERSARIAL.md about signatures, algorithms and keys.

func TestForgedSignature(t *testing.T) {
	f := newFixture(t)
	good := f.signRun(t)
	parts := strings.Split(good, ".")
	other := strings.Split(f.signRun(t), ".") // another grant, same key, other jti
	flip := func(seg string, i int) string {
		raw := []byte(seg)
		if raw[i] == 'A' {
			raw[i] = 'B'
		} else {
			raw[i] = 'A'
		}
		return string(raw)
	}
	random := make([]byte, 64)
	_, _ = rand.Read(random)
	tests := map[string]string{
		"flipped signature byte":         parts[0] + "." + parts[1] + "." + flip(parts[2], 10),
		"random signature":               parts[0] + "." + parts[1] + "." + b64(random),
		"all-zero signature":             parts[0] + "." + parts[1] + "." + b64(make([]byte, 64)),
		"short signature":                parts[0] + "." + parts[1] + "." + parts[2][:40],
		"signature of another grant":     parts[0] + "." + parts[1] + "." + other[2],
		"payload of another grant":       parts[0] + "." + other[1] + "." + parts[2],
		"tampered payload, old sig":      parts[0] + "." + b64(mustJSON(t, tamper(runClaims(), "epoch", 8))) + "." + parts[2],
		"signature over payload only":    parts[0] + "." + parts[1] + "." + b64(signWith(ourKey)([]byte(parts[1]))),
		"signature over decoded content": parts[0] + "." + parts[1] + "." + b64(signWith(ourKey)(mustJSON(t, runClaims()))),
	}
	for name, token := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := f.verifier.VerifyRun(token, testRunBinding())
			expectErr(t, token, err, ErrBadSignature)
		})
	}
	if _, err := f.verifier.VerifyRun(good, testRunBinding()); err != nil {
		t.Fatalf("the untouched grant must verify: %v", err)
	}
}

func tamper(m map[string]any, key string, value any) map[string]any {
	if value == nil {
		delete(m, key)
	} else {
		m[key] = value
	}
	return m
}

func TestOtherKeyWithOurKeyID(t *testing.T) {
	f := newFixture(t)
	// A signer with its own key but our kid: a perfectly valid token, for another key.
	impostor := mustSigner(t, SignerConfig{KeyID: testKeyID, PrivateKey: attackerKey, Issuer: testIssuer, Audience: testAudience, Lifetime: testLifetime, Now: f.clock.Now})
	g, err := impostor.SignRun(testRunBinding())
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.verifier.VerifyRun(g.Token, testRunBinding())
	expectErr(t, g.Token, err, ErrBadSignature)

	hand := rawToken(t, ourHeader(), runClaims(), signWith(attackerKey))
	_, err = f.verifier.VerifyRun(hand, testRunBinding())
	expectErr(t, hand, err, ErrBadSignature)
}

func TestAlgNoneAnyCasing(t *testing.T) {
	f := newFixture(t)
	for _, alg := range []string{"none", "None", "NONE", "nOnE", "noNe", " none", "none "} {
		for _, sig := range []struct {
			name string
			sign func([]byte) []byte
		}{
			{"empty signature", nil},
			{"our signature", signWith(ourKey)},
			{"junk signature", func([]byte) []byte { return []byte("x") }},
		} {
			t.Run(alg+"/"+sig.name, func(t *testing.T) {
				h := ourHeader()
				h["alg"] = alg
				token := rawToken(t, h, runClaims(), sig.sign)
				_, err := f.verifier.VerifyRun(token, testRunBinding())
				if sig.sign == nil {
					// An empty third segment is not a compact JWS at all.
					expectErr(t, token, err, ErrMalformed)
					token = strings.TrimSuffix(token, ".") + ".AA"
					_, err = f.verifier.VerifyRun(token, testRunBinding())
				}
				expectErr(t, token, err, ErrBadAlgorithm)
			})
		}
	}
	t.Run("library-built none token", func(t *testing.T) {
		tok := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims(runClaims()))
		tok.Header["kid"] = testKeyID
		token, err := tok.SignedString(jwt.UnsafeAllowNoneSignatureType)
		if err != nil {
			t.Fatal(err)
		}
		_, err = f.verifier.VerifyRun(token+"AA", testRunBinding())
		expectErr(t, token, err, ErrBadAlgorithm)
	})
}

func TestSymmetricAndOtherAlgorithms(t *testing.T) {
	f := newFixture(t)
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ec384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pub := []byte(publicOf(ourKey))
	// Tokens with real signatures under each algorithm, built by the library itself.
	library := []struct {
		name   string
		method jwt.SigningMethod
		key    any
	}{
		{"HS256 with our public key as secret", jwt.SigningMethodHS256, pub},
		{"HS256 with the base64 public key as secret", jwt.SigningMethodHS256, []byte(b64(pub))},
		{"HS384 with our public key as secret", jwt.SigningMethodHS384, pub},
		{"HS512 with our public key as secret", jwt.SigningMethodHS512, pub},
		{"HS256 with a random secret", jwt.SigningMethodHS256, []byte("secret")},
		{"RS256", jwt.SigningMethodRS256, rsaKey},
		{"RS512", jwt.SigningMethodRS512, rsaKey},
		{"PS256", jwt.SigningMethodPS256, rsaKey},
		{"ES256", jwt.SigningMethodES256, ecKey},
		{"ES384", jwt.SigningMethodES384, ec384},
	}
	for _, tt := range library {
		t.Run(tt.name, func(t *testing.T) {
			tok := jwt.NewWithClaims(tt.method, jwt.MapClaims(runClaims()))
			tok.Header["kid"] = testKeyID
			token, err := tok.SignedString(tt.key)
			if err != nil {
				t.Fatal(err)
			}
			_, err = f.verifier.VerifyRun(token, testRunBinding())
			expectErr(t, token, err, ErrBadAlgorithm)
		})
	}
	// Algorithm names the library does not know, or EdDSA in another spelling.
	hmacWithPub := func(in []byte) []byte { m := hmac.New(sha256.New, pub); m.Write(in); return m.Sum(nil) }
	for _, alg := range []any{"eddsa", "EDDSA", "EdDSA ", "Ed25519", "ES256K", "HS256X", "", 0, []string{"EdDSA"}, nil} {
		t.Run("alg "+jsonString(t, alg), func(t *testing.T) {
			h := ourHeader()
			h["alg"] = alg
			token := rawToken(t, h, runClaims(), hmacWithPub)
			_, err := f.verifier.VerifyRun(token, testRunBinding())
			expectErr(t, token, err, ErrBadAlgorithm)
		})
	}
	t.Run("alg missing", func(t *testing.T) {
		h := ourHeader()
		delete(h, "alg")
		token := rawToken(t, h, runClaims(), signWith(ourKey))
		_, err := f.verifier.VerifyRun(token, testRunBinding())
		expectErr(t, token, err, ErrBadAlgorithm)
	})
}

func jsonString(t testing.TB, v any) string { return string(mustJSON(t, v)) }

func TestCritHeaderRefused(t *testing.T) {
	f := newFixture(t)
	h := ourHeader()
	h["crit"] = []string{"exp"}
	token := rawToken(t, h, runClaims(), signWith(ourKey))
	_, err := f.verifier.VerifyRun(token, testRunBinding())
	expectErr(t, token, err, ErrMalformed)
}
