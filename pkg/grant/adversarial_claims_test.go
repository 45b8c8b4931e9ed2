package grant

import (
	"errors"
	"testing"
	"time"
)

// The Grants cases of ADVERSARIAL.md about registered claims, lifetime and purpose. Every
// token here carries a valid signature from our key (hand-built where our signer would
// refuse to produce it), so that the claim check itself is what refuses it.

// claimCase is a payload mutation and the error it must produce.
type claimCase struct {
	name   string
	mutate func(map[string]any)
	want   error
}

func runClaimCases(t *testing.T, cases []claimCase) {
	t.Helper()
	f := newFixture(t)
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			c := runClaims()
			tt.mutate(c)
			token := rawToken(t, ourHeader(), c, signWith(ourKey))
			_, err := f.verifier.VerifyRun(token, testRunBinding())
			expectErr(t, token, err, tt.want)
		})
	}
}

func set(key string, value any) func(map[string]any) {
	return func(m map[string]any) { m[key] = value }
}

func unset(key string) func(map[string]any) {
	return func(m map[string]any) { delete(m, key) }
}

func TestHandMadeBaselineVerifies(t *testing.T) {
	runClaimCases(t, []claimCase{{"baseline", func(map[string]any) {}, nil}})
}

func TestWrongOrMissingIssuer(t *testing.T) {
	runClaimCases(t, []claimCase{
		{"other issuer", set("iss", "someone-else"), ErrWrongIssuer},
		{"issuer differs in case", set("iss", "Execplane-Gateway"), ErrWrongIssuer},
		{"issuer with suffix", set("iss", testIssuer+" "), ErrWrongIssuer},
		{"empty issuer", set("iss", ""), ErrWrongIssuer},
		{"missing issuer", unset("iss"), ErrWrongIssuer},
		{"null issuer", set("iss", nil), ErrWrongIssuer},
		{"numeric issuer", set("iss", 7), ErrMalformed},
	})
}

func TestWrongOrMissingAudience(t *testing.T) {
	runClaimCases(t, []claimCase{
		{"other audience", set("aud", []string{"other"}), ErrWrongAudience},
		{"other audience as string", set("aud", "other"), ErrWrongAudience},
		{"ours as plain string", set("aud", testAudience), nil},
		{"ours among others", set("aud", []string{"other", testAudience}), ErrWrongAudience},
		{"ours twice", set("aud", []string{testAudience, testAudience}), ErrWrongAudience},
		{"empty audience", set("aud", ""), ErrWrongAudience},
		{"empty list", set("aud", []string{}), ErrWrongAudience},
		{"missing audience", unset("aud"), ErrWrongAudience},
		{"numeric audience", set("aud", 1), ErrMalformed},
	})
}

func TestExpiredMissingOrNonNumericExp(t *testing.T) {
	// The fixture's clock is t0; the grant was issued at t0.
	exp := func(d time.Duration) func(map[string]any) {
		return func(m map[string]any) {
			m["iat"] = t0.Add(d - testLifetime).Unix()
			m["nbf"] = m["iat"]
			m["exp"] = t0.Add(d).Unix()
		}
	}
	runClaimCases(t, []claimCase{
		{"expired long ago", exp(-time.Hour), ErrExpired},
		{"expired beyond the leeway", exp(-Leeway - time.Second), ErrExpired},
		{"expired exactly the leeway ago", exp(-Leeway), ErrExpired},
		{"expired within the leeway", exp(-Leeway + time.Second), nil},
		{"missing exp", unset("exp"), ErrMalformed},
		{"null exp", set("exp", nil), ErrMalformed},
		{"exp as word", set("exp", "tomorrow"), ErrMalformed},
		{"exp as object", set("exp", map[string]any{"seconds": 1}), ErrMalformed},
		{"exp as bool", set("exp", true), ErrMalformed},
		{"exp as huge number", set("exp", 1e300), ErrMalformed},
		{"exp in the year 9999", set("exp", 253402300799), ErrLifetimeExceeded},
		{"exp negative", set("exp", -1), ErrMalformed},
		{"exp equal to iat", set("exp", t0.Unix()), ErrMalformed},
	})
}

func TestFutureNotBeforeOrIssuedAt(t *testing.T) {
	runClaimCases(t, []claimCase{
		{"nbf in the future", set("nbf", t0.Add(time.Minute).Unix()), ErrNotYetValid},
		{"nbf just beyond the leeway", set("nbf", t0.Add(Leeway+time.Second).Unix()), ErrNotYetValid},
		{"nbf within the leeway", set("nbf", t0.Add(Leeway).Unix()), nil},
		{"nbf missing (optional)", unset("nbf"), nil},
		{"nbf as word", set("nbf", "soon"), ErrMalformed},
		{"iat in the future", func(m map[string]any) {
			m["iat"] = t0.Add(time.Minute).Unix()
			m["nbf"] = m["iat"]
			m["exp"] = t0.Add(time.Minute + testLifetime).Unix()
		}, ErrNotYetValid},
		{"iat within the leeway", func(m map[string]any) {
			m["iat"] = t0.Add(Leeway).Unix()
			m["nbf"] = m["iat"]
			m["exp"] = t0.Add(Leeway + testLifetime).Unix()
		}, nil},
		{"iat missing", unset("iat"), ErrMalformed},
		{"iat as word", set("iat", "now"), ErrMalformed},
	})
}

func TestLifetimeAboveCeiling(t *testing.T) {
	lifetime := func(d time.Duration) func(map[string]any) {
		return func(m map[string]any) { m["exp"] = t0.Add(d).Unix() }
	}
	runClaimCases(t, []claimCase{
		{"at the ceiling", lifetime(MaxLifetime), nil},
		{"one second above", lifetime(MaxLifetime + time.Second), ErrLifetimeExceeded},
		{"a year", lifetime(365 * 24 * time.Hour), ErrLifetimeExceeded},
		{"backdated iat, short remaining life", func(m map[string]any) {
			m["iat"] = t0.Add(-time.Hour).Unix()
			m["exp"] = t0.Add(time.Minute).Unix()
		}, ErrLifetimeExceeded},
	})
	t.Run("verifier with a lower ceiling", func(t *testing.T) {
		f := newFixture(t)
		v := mustVerifier(t, VerifierConfig{Issuer: testIssuer, Audience: testAudience, MaxLifetime: time.Minute, Keys: f.keys, Now: f.clock.Now})
		token := f.signRun(t) // 5 minutes
		_, err := v.VerifyRun(token, testRunBinding())
		expectErr(t, token, err, ErrLifetimeExceeded)
	})
}

func TestWrongPurpose(t *testing.T) {
	f := newFixture(t)
	t.Run("environment grant where a run grant is required", func(t *testing.T) {
		token := f.signEnv(t)
		_, err := f.verifier.VerifyRun(token, testRunBinding())
		expectErr(t, token, err, ErrWrongPurpose)
	})
	t.Run("run grant where an environment grant is required", func(t *testing.T) {
		token := f.signRun(t)
		_, err := f.verifier.VerifyEnvironment(token, testEnvBinding())
		expectErr(t, token, err, ErrWrongPurpose)
	})
	runClaimCases(t, []claimCase{
		{"unknown purpose", set("purpose", "admin"), ErrWrongPurpose},
		{"purpose in capitals", set("purpose", "RUN"), ErrWrongPurpose},
		{"missing purpose", unset("purpose"), ErrWrongPurpose},
		{"numeric purpose", set("purpose", 1), ErrMalformed},
	})
	t.Run("environment purpose with run claims", func(t *testing.T) {
		c := runClaims()
		c["purpose"] = string(PurposeEnvironment)
		token := rawToken(t, ourHeader(), c, signWith(ourKey))
		_, err := f.verifier.VerifyEnvironment(token, testEnvBinding())
		expectErr(t, token, err, ErrMalformed)
	})
}

func TestRequiredBindingClaims(t *testing.T) {
	var cases []claimCase
	for _, name := range []string{"jti", "client_hash", "owner_hash", "binding_id", "env_name", "env_uid", "run_id", "claim_id"} {
		cases = append(cases, claimCase{"missing " + name, unset(name), ErrMalformed})
	}
	cases = append(cases,
		claimCase{"epoch as string", set("epoch", "7"), ErrMalformed},
		claimCase{"negative epoch", set("epoch", -1), ErrMalformed},
		claimCase{"generation above uint64", set("grant_generation", 1e20), ErrMalformed},
	)
	runClaimCases(t, cases)
}

func TestExpiredAndBadlySigned(t *testing.T) {
	f := newFixture(t)
	expired := runClaims()
	expired["iat"] = t0.Add(-time.Hour).Unix()
	expired["nbf"] = expired["iat"]
	expired["exp"] = t0.Add(-time.Hour + testLifetime).Unix()

	// Sanity: with a good signature it is merely expired.
	token := rawToken(t, ourHeader(), expired, signWith(ourKey))
	_, err := f.verifier.VerifyRun(token, testRunBinding())
	expectErr(t, token, err, ErrExpired)

	// Every way of being badly signed wins over being expired, and nothing is accepted.
	noneHeader := ourHeader()
	noneHeader["alg"] = "none"
	unknownKid := ourHeader()
	unknownKid["kid"] = "nobody"
	tests := []struct {
		name  string
		token string
		want  error
	}{
		{"attacker signature", rawToken(t, ourHeader(), expired, signWith(attackerKey)), ErrBadSignature},
		{"junk signature", rawToken(t, ourHeader(), expired, func([]byte) []byte { return make([]byte, 64) }), ErrBadSignature},
		{"alg none", rawToken(t, noneHeader, expired, signWith(attackerKey)), ErrBadAlgorithm},
		{"unknown kid", rawToken(t, unknownKid, expired, signWith(attackerKey)), ErrUnknownKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := f.verifier.VerifyRun(tt.token, testRunBinding())
			expectErr(t, tt.token, err, tt.want)
		})
	}

	// And the same for a token of our own signer, expired by the clock, then re-signed.
	fresh := f.signRun(t)
	f.clock.now = t0.Add(time.Hour)
	_, err = f.verifier.VerifyRun(fresh, testRunBinding())
	expectErr(t, fresh, err, ErrExpired)
	forged := fresh[:len(fresh)-10] + "AAAAAAAAAA"
	_, err = f.verifier.VerifyRun(forged, testRunBinding())
	if err == nil {
		t.Fatal("a forged, expired token verified")
	}
	if !errIsAny(err, ErrBadSignature, ErrMalformed) {
		t.Fatalf("want a signature or encoding error, got %v", err)
	}
}

func errIsAny(err error, targets ...error) bool {
	for _, target := range targets {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}
