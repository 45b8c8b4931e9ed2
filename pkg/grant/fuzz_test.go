package grant

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// fuzzSeeds returns genuine grants from the fixture's signer plus hostile variants, so that
// the fuzzer starts next to every branch of the verifier.
func fuzzSeeds(t testing.TB, f *fixture) []string {
	seeds := []string{f.signRun(t), f.signEnv(t)}
	run := strings.Split(seeds[0], ".")
	noneHeader := ourHeader()
	noneHeader["alg"] = "none"
	jkuHeader := ourHeader()
	jkuHeader["jku"] = "http://127.0.0.1:1/keys"
	pathKid := ourHeader()
	pathKid["kid"] = "../../etc/passwd"
	return append(seeds,
		"",
		"..",
		"a.b.c",
		run[0]+"."+run[1]+".",
		run[0]+"."+run[1]+"."+run[2][:len(run[2])-2],
		run[0]+"."+run[1]+"."+run[2]+"\n",
		rawToken(t, noneHeader, runClaims(), nil)+"AA",
		rawToken(t, jkuHeader, runClaims(), signWith(attackerKey)),
		rawToken(t, pathKid, runClaims(), signWith(ourKey)),
		rawToken(t, ourHeader(), runClaims(), signWith(attackerKey)),
		rawToken(t, map[string]any{"alg": "HS256", "kid": testKeyID}, runClaims(), func(b []byte) []byte { return b[:32] }),
		strings.Repeat("A", MaxTokenBytes+1),
	)
}

// signerOutput returns the token our signer produces for the claims that token carries.
// Ed25519 is deterministic and the signer's encoding canonical, so a token the signer
// produced is equal to its own signerOutput, and any other string that verifies is not.
func signerOutput(t *testing.T, token string) string {
	payload, err := base64.RawURLEncoding.DecodeString(strings.Split(token, ".")[1])
	if err != nil {
		t.Fatalf("a verified token with an undecodable payload: %v", err)
	}
	var c claims
	if err := json.Unmarshal(payload, &c); err != nil {
		t.Fatalf("a verified token with an undecodable payload: %v", err)
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, &c)
	tok.Header["kid"] = testKeyID
	out, err := tok.SignedString(ourKey)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// FuzzVerify feeds arbitrary strings to both verification entry points. Nothing may
// panic, and nothing verifies unless it is byte for byte what the signer produces.
func FuzzVerify(f *testing.F) {
	fx := newFixture(f)
	for _, s := range fuzzSeeds(f, fx) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, token string) {
		if _, err := fx.verifier.VerifyRun(token, testRunBinding()); err == nil && signerOutput(t, token) != token {
			t.Fatalf("VerifyRun accepted a token the signer never produced: %q", token)
		}
		if _, err := fx.verifier.VerifyEnvironment(token, testEnvBinding()); err == nil && signerOutput(t, token) != token {
			t.Fatalf("VerifyEnvironment accepted a token the signer never produced: %q", token)
		}
	})
}

// FuzzVerifySignedPayload signs arbitrary payloads with our own key, so that the fuzzer
// reaches the claim checks behind the signature. Nothing may panic, and whatever verifies
// must satisfy every documented check when re-read independently, its member names
// included (canonicalMembers).
func FuzzVerifySignedPayload(f *testing.F) {
	fx := newFixture(f)
	f.Add(mustJSON(f, runClaims()), int64(0))
	f.Add(mustJSON(f, tamper(runClaims(), "exp", "soon")), int64(0))
	f.Add(mustJSON(f, tamper(runClaims(), "aud", []string{"x", testAudience})), int64(60))
	f.Add(mustJSON(f, tamper(runClaims(), "purpose", "environment")), int64(-3600))
	f.Add([]byte(`{"exp":1e309}`), int64(1))
	f.Fuzz(func(t *testing.T, payload []byte, skew int64) {
		fx.clock.now = t0.Add(time.Duration(skew%86400) * time.Second)
		token := b64(mustJSON(t, ourHeader())) + "." + b64(payload)
		token += "." + b64(signWith(ourKey)([]byte(token)))
		v, err := fx.verifier.VerifyRun(token, testRunBinding())
		if err != nil {
			return
		}
		if err := canonicalMembers(payload); err != nil {
			t.Fatalf("accepted a payload other JWT parsers may read differently: %v", err)
		}
		lifetime := v.ExpiresAt.Sub(v.IssuedAt)
		now := fx.clock.now
		switch {
		case lifetime <= 0 || lifetime > MaxLifetime:
			t.Fatalf("accepted a lifetime of %s", lifetime)
		case !now.Before(v.ExpiresAt.Add(Leeway)):
			t.Fatalf("accepted a grant expired at %v (now %v)", v.ExpiresAt, now)
		case now.Before(v.IssuedAt.Add(-Leeway)):
			t.Fatalf("accepted a grant issued at %v (now %v)", v.IssuedAt, now)
		case v.Purpose != PurposeRun || v.Binding != testRunBinding():
			t.Fatalf("accepted %+v", v)
		}
	})
}

// claimNames are the claims docs/grants.md documents, the only ones a grant may carry.
var claimNames = []string{
	"iss", "aud", "iat", "nbf", "exp", "jti", "purpose", "client_hash", "owner_hash",
	"binding_id", "env_name", "env_uid", "grant_generation", "epoch", "run_id", "claim_id",
}

// canonicalMembers re-reads an accepted payload independently of the verifier: a JSON
// object whose member names are documented claim names, each written literally (as
// encoding/json writes it, without escapes) and each once, so that every JWT parser reads
// the same claims from it.
func canonicalMembers(payload []byte) error {
	dec := json.NewDecoder(bytes.NewReader(payload))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return errors.New("not a JSON object")
	}
	seen := map[string]bool{}
	for dec.More() {
		from := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		name := tok.(string)
		written := bytes.Trim(payload[from:dec.InputOffset()], " \t\r\n,")
		switch {
		case !bytes.Equal(written, mustJSONString(name)):
			return fmt.Errorf("member name %s not written literally", written)
		case !slices.Contains(claimNames, name):
			return fmt.Errorf("undocumented claim %q", name)
		case seen[name]:
			return fmt.Errorf("claim %q twice", name)
		}
		seen[name] = true
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return err
		}
	}
	return nil
}

func mustJSONString(s string) []byte {
	b, _ := json.Marshal(s) // a string always encodes
	return b
}
