package grant

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/execplane/execplane/pkg/ident"
)

// The Grants cases of ADVERSARIAL.md about the token as a string and its header: size,
// shape, hostile kids and embedded or remote keys.

func TestOversizedTokenRejectedBeforeParsing(t *testing.T) {
	f := newFixture(t)
	want := testRunBinding()

	// A genuinely signed grant, padded to just over the bound through its jti (free-form)
	// and an ignored header parameter (unknown claims are refused).
	padded := func(t *testing.T, target int) string {
		t.Helper()
		// Each padding byte adds about 4/3 characters: start just short of the target.
		base := len(rawToken(t, ourHeader(), runClaims(), signWith(ourKey)))
		for pad := max(0, (target-base)*3/4-16); pad < MaxTokenBytes; pad++ {
			for hpad := 0; hpad < 3; hpad++ {
				h := ourHeader()
				h["x"] = strings.Repeat("h", hpad)
				c := runClaims()
				c["jti"] = strings.Repeat("p", pad)
				// An Ed25519 signature is always 86 base64url characters: sign only the match.
				input := b64(mustJSON(t, h)) + "." + b64(mustJSON(t, c))
				if len(input)+1+86 == target {
					return input + "." + b64(ed25519.Sign(ourKey, []byte(input)))
				}
			}
		}
		t.Fatalf("no padding gives a %d-byte token", target)
		return ""
	}
	atBound := padded(t, MaxTokenBytes)
	if _, err := f.verifier.VerifyRun(atBound, want); err != nil {
		t.Fatalf("a valid %d-byte token must verify: %v", len(atBound), err)
	}
	over := padded(t, MaxTokenBytes+1)

	tests := map[string]string{
		"valid signature, one byte over": over,
		"garbage, one byte over":         strings.Repeat("!", MaxTokenBytes+1),
		"dots, one byte over":            strings.Repeat(".", MaxTokenBytes+1),
		"ten megabytes":                  strings.Repeat("A", 10<<20),
		"huge kid":                       rawToken(t, map[string]any{"alg": "EdDSA", "kid": strings.Repeat("k", 1<<20)}, runClaims(), signWith(ourKey)),
	}
	for name, token := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := f.verifier.VerifyRun(token, want)
			expectErr(t, token, err, ErrOversized)
			// Refusing it allocates nothing: not a byte was decoded.
			if allocs := testing.AllocsPerRun(10, func() { _, _ = f.verifier.VerifyRun(token, want) }); allocs != 0 {
				t.Fatalf("refusing an oversized token allocated %v times", allocs)
			}
		})
	}
}

func TestMalformedTokens(t *testing.T) {
	f := newFixture(t)
	good := f.signRun(t)
	p := strings.Split(good, ".")
	tests := map[string]string{
		"empty":                     "",
		"one dot":                   ".",
		"two dots":                  "..",
		"two segments":              p[0] + "." + p[1],
		"four segments":             good + ".AA",
		"empty header":              "." + p[1] + "." + p[2],
		"empty payload":             p[0] + ".." + p[2],
		"empty signature":           p[0] + "." + p[1] + ".",
		"padding":                   good + "==",
		"standard base64 chars":     p[0] + "." + p[1] + "+/" + "." + p[2],
		"space":                     p[0] + " ." + p[1] + "." + p[2],
		"newline inside signature":  p[0] + "." + p[1] + "." + p[2][:20] + "\n" + p[2][20:],
		"CR inside signature":       p[0] + "." + p[1] + "." + p[2][:20] + "\r" + p[2][20:],
		"trailing newline":          good + "\n",
		"NUL":                       good + "\x00",
		"non-ASCII":                 p[0] + "." + p[1] + "é." + p[2],
		"header not JSON":           b64([]byte("alg=EdDSA")) + "." + p[1] + "." + p[2],
		"header a JSON array":       b64([]byte(`["EdDSA"]`)) + "." + p[1] + "." + p[2],
		"payload not JSON":          p[0] + "." + b64([]byte("hello")) + "." + p[2],
		"payload a JSON string":     p[0] + "." + b64([]byte(`"x"`)) + "." + p[2],
		"non-canonical base64 bits": p[0] + "." + p[1] + "." + p[2][:len(p[2])-1] + nonCanonicalLast(p[2]),
		"Bearer prefix":             "Bearer " + good,
	}
	for name, token := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := f.verifier.VerifyRun(token, testRunBinding())
			expectErr(t, token, err, ErrMalformed)
		})
	}
}

// nonCanonicalLast returns another final character for a 64-byte signature's 86-character
// encoding that decodes to the same bytes (its low four bits are padding).
func nonCanonicalLast(seg string) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	i := strings.IndexByte(alphabet, seg[len(seg)-1])
	return string(alphabet[i|1])
}

func TestUnknownOrHostileKeyIDNoIO(t *testing.T) {
	f := newFixture(t)
	// A file an unwary verifier might read if it treated the kid as a path: it holds the
	// attacker's public key. The verifier must not care.
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "attacker.pub")
	if err := os.WriteFile(keyFile, publicOf(attackerKey), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	kids := map[string]any{
		"unknown":                 "grant-2029-12",
		"our kid in capitals":     strings.ToUpper(testKeyID),
		"our kid with a space":    testKeyID + " ",
		"relative path":           "attacker.pub",
		"absolute path":           keyFile,
		"traversal":               "../../../../etc/passwd",
		"traversal to key file":   "../" + filepath.Base(dir) + "/attacker.pub",
		"URL":                     "https://attacker.example/key",
		"NUL":                     testKeyID + "\x00",
		"NUL then path":           "\x00../../etc/shadow",
		"one byte too long":       strings.Repeat("k", MaxKeyIDBytes+1),
		"large, within the token": strings.Repeat("k", 2500),
		"empty":                   "",
		"unicode lookalike":       "grant-2030-０1",
		"number":                  1,
		"array":                   []string{testKeyID},
		"object":                  map[string]any{"kid": testKeyID},
		"null":                    nil,
	}
	for name, kid := range kids {
		for _, signer := range []struct {
			name string
			key  []byte
		}{{"attacker-signed", attackerKey}, {"our-signed", ourKey}} {
			t.Run(name+"/"+signer.name, func(t *testing.T) {
				h := ourHeader()
				h["kid"] = kid
				token := rawToken(t, h, runClaims(), signWith(signer.key))
				_, err := f.verifier.VerifyRun(token, testRunBinding())
				expectErr(t, token, err, ErrUnknownKey)
			})
		}
	}
	t.Run("missing kid", func(t *testing.T) {
		h := ourHeader()
		delete(h, "kid")
		token := rawToken(t, h, runClaims(), signWith(ourKey))
		_, err := f.verifier.VerifyRun(token, testRunBinding())
		expectErr(t, token, err, ErrUnknownKey)
	})
	// The no-I/O half of the case is structural: TestVerifierImportsNoIO proves the package
	// cannot reach a file or the network, and TestEmbeddedKeyHeadersIgnored that it does not.
}

func TestEmbeddedKeyHeadersIgnored(t *testing.T) {
	f := newFixture(t)
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		requests.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"grant-2030-01","x":"` + b64(publicOf(attackerKey)) + `"}]}`))
	}))
	defer srv.Close()

	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	attackerJWK := map[string]any{"kty": "OKP", "crv": "Ed25519", "kid": testKeyID, "x": b64(publicOf(attackerKey))}
	hostile := map[string]map[string]any{
		"jku":            {"jku": srv.URL + "/jwks.json"},
		"x5u":            {"x5u": srv.URL + "/cert.pem"},
		"embedded jwk":   {"jwk": attackerJWK},
		"x5c":            {"x5c": []string{b64([]byte("not a certificate"))}},
		"jwk for ECDSA":  {"jwk": map[string]any{"kty": "EC", "crv": "P-256", "x": b64(ecKey.X.Bytes()), "y": b64(ecKey.Y.Bytes())}},
		"all at once":    {"jku": srv.URL, "x5u": srv.URL, "jwk": attackerJWK, "x5c": []string{"AA"}},
		"kid at the URL": {"jku": srv.URL, "kid": "remote-only"},
	}
	for name, extra := range hostile {
		t.Run(name, func(t *testing.T) {
			h := ourHeader()
			for k, v := range extra {
				h[k] = v
			}
			// Signed by the attacker, whose key the headers point to: refused.
			token := rawToken(t, h, runClaims(), signWith(attackerKey))
			_, err := f.verifier.VerifyRun(token, testRunBinding())
			if _, remoteKid := extra["kid"]; remoteKid {
				expectErr(t, token, err, ErrUnknownKey)
			} else {
				expectErr(t, token, err, ErrBadSignature)
			}
			// Signed by us with the same headers: accepted, the headers never consulted.
			if _, remoteKid := extra["kid"]; !remoteKid {
				ours := rawToken(t, h, runClaims(), signWith(ourKey))
				if _, err := f.verifier.VerifyRun(ours, testRunBinding()); err != nil {
					t.Fatalf("our own token with ignored headers: %v", err)
				}
			}
		})
	}
	if n := requests.Load(); n != 0 {
		t.Fatalf("the verifier made %d requests", n)
	}
}

func TestErrorMessagesNeverQuoteTokens(t *testing.T) {
	// expectErr checks every error of the adversarial tests; this adds the claim values.
	f := newFixture(t)
	token := f.signRun(t)
	want := testRunBinding()
	want.Environment.UID = "5d1c0a7e-0000-4000-8000-000000000001"
	_, err := f.verifier.VerifyRun(token, want)
	for _, value := range []string{want.Environment.UID, testEnvBinding().Environment.UID, want.Client, ident.ClientHash(want.Client), want.OwnerHash} {
		if strings.Contains(err.Error(), value) {
			t.Fatalf("error %q quotes a claim value", err)
		}
	}
}
