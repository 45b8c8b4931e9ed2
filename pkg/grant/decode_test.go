package grant

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/go-cmp/cmp"

	"github.com/execplane/execplane/pkg/apierror"
)

// The parser-differential cases: payloads and headers that encoding/json reads one way and
// other JWT parsers another (names in another case, escaped names, duplicates, claims the
// signer never writes). Every token is built from literal JSON, since a map cannot hold a
// duplicate or keep an escape, and signed with our key, so that the strict decoding itself
// is what refuses it.

// ourHeaderJSON is the header our signer writes, as literal JSON.
const ourHeaderJSON = `{"alg":"EdDSA","kid":"` + testKeyID + `","typ":"JWT"}`

// literalToken signs header.payload, both literal JSON, with key.
func literalToken(header, payload string, key []byte) string {
	input := b64([]byte(header)) + "." + b64([]byte(payload))
	return input + "." + b64(signWith(key)([]byte(input)))
}

// runPayload is runClaims as literal JSON: its members sorted, from "aud" to "run_id".
func runPayload(t *testing.T) string { return string(mustJSON(t, runClaims())) }

// edit returns a payload edit replacing the one occurrence of old with new.
func edit(old, new string) func(*testing.T, string) string {
	return func(t *testing.T, payload string) string {
		t.Helper()
		if strings.Count(payload, old) != 1 {
			t.Fatalf("%q does not occur once in %s", old, payload)
		}
		return strings.Replace(payload, old, new, 1)
	}
}

// prepend returns a payload edit adding members before the first one.
func prepend(members string) func(*testing.T, string) string {
	return func(_ *testing.T, payload string) string { return "{" + members + "," + payload[1:] }
}

// expectRefusal is expectErr plus the API class every refusal here belongs to, and the
// reason its message gives, so that no case passes by being refused for another reason.
func expectRefusal(t *testing.T, token string, err, want error, why string) {
	t.Helper()
	expectErr(t, token, err, want)
	if want == nil {
		return
	}
	if !errors.Is(err, apierror.ErrGrantInvalid) {
		t.Fatalf("want the class %v, got %v", apierror.ErrGrantInvalid, err)
	}
	if !strings.Contains(err.Error(), why) {
		t.Fatalf("want a refusal for %q, got %v", why, err)
	}
}

func TestStrictClaimDecoding(t *testing.T) {
	f := newFixture(t)
	exp := `"exp":` + jsonString(t, t0.Add(testLifetime).Unix())
	tests := []struct {
		name string
		edit func(*testing.T, string) string
		want error
		why  string // in the message
	}{
		{"baseline", func(_ *testing.T, p string) string { return p }, nil, ""},
		{"white space around names and values", func(_ *testing.T, p string) string {
			return strings.NewReplacer(`{"`, "{\n\t\"", `":`, `" : `, `,"`, " ,\r\n \"").Replace(p) + "\n"
		}, nil, ""},
		{"escaped value", edit(`"run-1"`, `"run\u002d1"`), nil, ""},

		{"upper-case claim name", edit(`"exp":`, `"EXP":`), ErrMalformed, "unknown claim"},
		{"claim name in mixed case", edit(`"purpose":`, `"Purpose":`), ErrMalformed, "unknown claim"},
		{"claim name equal under Unicode case folding", edit(`"iss":`, `"iſſ":`), ErrMalformed, "unknown claim"},
		{"escaped claim name", edit(`"jti":`, `"\u006a\u0074\u0069":`), ErrMalformed, "escaped claim name"},
		{"partly escaped claim name", edit(`"jti":`, `"j\u0074i":`), ErrMalformed, "escaped claim name"},
		{"escaped solidus in a claim name", edit(`"jti":`, `"jti\/":`), ErrMalformed, "escaped claim name"},
		{"duplicate exp, the last one valid", prepend(`"exp":1`), ErrMalformed, "duplicate claim"},
		{"duplicate exp, the same value", prepend(exp), ErrMalformed, "duplicate claim"},
		{"duplicate purpose", prepend(`"purpose":"environment"`), ErrMalformed, "duplicate claim"},
		{"duplicate through an escape", prepend(`"\u0065xp":1`), ErrMalformed, "escaped claim name"},
		{"unknown claim", prepend(`"pad":"x"`), ErrMalformed, "unknown claim"},
		{"unknown claim, null", prepend(`"pad":null`), ErrMalformed, "unknown claim"},
		{"sub claim", prepend(`"sub":"someone"`), ErrMalformed, "unknown claim"},
		{"empty claim name", prepend(`"":1`), ErrMalformed, "unknown claim"},
		{"object with duplicates as a claim value", edit(`"aud":["execplane"]`, `"aud":{"a":1,"a":2}`), ErrMalformed, "ill-typed aud claim"},
		{"fractional epoch", edit(`"epoch":7`, `"epoch":7.0`), ErrMalformed, "ill-typed epoch claim"},
		{"payload null", func(*testing.T, string) string { return "null" }, ErrMalformed, "not a JSON object"},
		{"payload an array", func(_ *testing.T, p string) string { return "[" + p + "]" }, ErrMalformed, "undecodable"},
		{"payload an empty object", func(*testing.T, string) string { return "{}" }, ErrWrongIssuer, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			token := literalToken(ourHeaderJSON, tt.edit(t, runPayload(t)), ourKey)
			_, err := f.verifier.VerifyRun(token, testRunBinding())
			expectRefusal(t, token, err, tt.want, tt.why)
		})
	}
}

// TestClaimsDecodedOnlyAfterSignature: a forgery is answered by its signature alone, however
// its claims are written (DESIGN.md §3, VerifyRun's precedence).
func TestClaimsDecodedOnlyAfterSignature(t *testing.T) {
	f := newFixture(t)
	for name, edit := range map[string]func(*testing.T, string) string{
		"upper-case claim name": edit(`"exp":`, `"EXP":`),
		"escaped claim name":    edit(`"jti":`, `"\u006a\u0074\u0069":`),
		"duplicate exp":         prepend(`"exp":1`),
		"unknown claim":         prepend(`"pad":"x"`),
		"ill-typed exp":         edit(`"exp":`, `"exp":"soon","x":`),
	} {
		t.Run(name, func(t *testing.T) {
			token := literalToken(ourHeaderJSON, edit(t, runPayload(t)), attackerKey)
			_, err := f.verifier.VerifyRun(token, testRunBinding())
			expectErr(t, token, err, ErrBadSignature)
		})
	}
}

func TestStrictHeaderDecoding(t *testing.T) {
	f := newFixture(t)
	kid := `"kid":"` + testKeyID + `"`
	tests := []struct {
		name   string
		header string
		want   error
		why    string // in the message
	}{
		{"baseline", ourHeaderJSON, nil, ""},
		{"white space", "{ \"alg\" : \"EdDSA\" ,\r\n\t" + kid + " }", nil, ""},
		{"unknown parameters ignored", `{"alg":"EdDSA",` + kid + `,"KID":"other","x":[{"a":1},{"a":1}]}`, nil, ""},

		{"duplicate kid", `{"alg":"EdDSA","kid":"other",` + kid + `}`, ErrMalformed, "duplicate header parameter"},
		{"duplicate kid, the same value", `{"alg":"EdDSA",` + kid + `,` + kid + `}`, ErrMalformed, "duplicate header parameter"},
		{"duplicate alg", `{"alg":"HS256","alg":"EdDSA",` + kid + `}`, ErrMalformed, "duplicate header parameter"},
		{"duplicate typ", `{"alg":"EdDSA",` + kid + `,"typ":"JWT","typ":"JWT"}`, ErrMalformed, "duplicate header parameter"},
		{"escaped kid name", `{"alg":"EdDSA","\u006bid":"` + testKeyID + `"}`, ErrMalformed, "escaped header parameter name"},
		{"escaped name of an ignored parameter", `{"alg":"EdDSA",` + kid + `,"j\u006bu":"x"}`, ErrMalformed, "escaped header parameter name"},
		{"duplicate inside an ignored jwk", `{"alg":"EdDSA",` + kid + `,"jwk":{"kty":"OKP","x":"a","x":"b"}}`, ErrMalformed, "duplicate header parameter"},
		{"duplicate deep inside an ignored parameter", `{"alg":"EdDSA",` + kid + `,"x":[[{"a":{"b":1,"b":2}}]]}`, ErrMalformed, "duplicate header parameter"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			token := literalToken(tt.header, runPayload(t), ourKey)
			_, err := f.verifier.VerifyRun(token, testRunBinding())
			expectRefusal(t, token, err, tt.want, tt.why)
		})
	}
}

// TestClaimFieldsMatchTags keeps claims.field, the decoder's name table, in step with the
// json tags the signer encodes with: every tag but sub decodes into its own field.
func TestClaimFieldsMatchTags(t *testing.T) {
	var c claims
	var names []string
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) {
		for i := range v.NumField() {
			sf, fv := v.Type().Field(i), v.Field(i)
			if sf.Anonymous {
				walk(fv)
				continue
			}
			name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
			names = append(names, name)
			got := c.field(name)
			switch {
			case name == "sub":
				if got != nil {
					t.Errorf("sub is decoded: the signer never writes it")
				}
			case got == nil:
				t.Errorf("claim %q (field %s) is not decoded", name, sf.Name)
			case reflect.ValueOf(got).Pointer() != fv.Addr().Pointer():
				t.Errorf("claim %q decodes into another field than %s", name, sf.Name)
			}
		}
	}
	walk(reflect.ValueOf(&c).Elem())
	decoded := slices.DeleteFunc(names, func(n string) bool { return n == "sub" })
	if len(decoded) != claimCount {
		t.Errorf("claims has %d decoded claims, claimCount says %d", len(decoded), claimCount)
	}
	// The fuzz oracle's list is the documented one (docs/grants.md).
	if diff := cmp.Diff(slices.Sorted(slices.Values(claimNames)), slices.Sorted(slices.Values(decoded))); diff != "" {
		t.Errorf("documented claims (-) and decoded claims (+) differ:\n%s", diff)
	}
}

// TestDecodeClaimsRoundTrip: whatever the signer encodes, decodeClaims reads back equal.
func TestDecodeClaimsRoundTrip(t *testing.T) {
	for name, c := range map[string]claims{
		"run": {
			RegisteredClaims: jwt.RegisteredClaims{
				Issuer:    testIssuer,
				Audience:  jwt.ClaimStrings{testAudience},
				ExpiresAt: jwt.NewNumericDate(t0.Add(testLifetime)),
				NotBefore: jwt.NewNumericDate(t0),
				IssuedAt:  jwt.NewNumericDate(t0),
				ID:        "c2VlZC1ydW4tZ3JhbnQtMQ",
			},
			Purpose: PurposeRun, ClientHash: strings.Repeat("cd", 32), OwnerHash: strings.Repeat("ab", 32),
			BindingID: "conversation:42", EnvironmentName: "env-x", EnvironmentUID: testEnvBinding().Environment.UID,
			GrantGeneration: 1<<64 - 1, Epoch: 1<<64 - 1, RunID: "run-1", ClaimID: "claim-abc",
		},
		"environment": {
			RegisteredClaims: jwt.RegisteredClaims{Issuer: testIssuer, ExpiresAt: jwt.NewNumericDate(time.Unix(maxUnixSeconds, 0))},
			Purpose:          PurposeEnvironment,
		},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := decodeClaims(mustJSON(t, &c))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(c, got); diff != "" {
				t.Errorf("decodeClaims(json.Marshal(c)) differs (-want +got):\n%s", diff)
			}
		})
	}
}

// TestStrictDecodingErrorsQuoteNothing: a refused name chosen by the payload never reaches
// the error message.
func TestStrictDecodingErrorsQuoteNothing(t *testing.T) {
	for _, payload := range []string{
		`{"secret-name-1":1}`,
		`{"secret-name-1":1,"secret-name-1":1}`,
		`{"secret\u002dname-1":1}`,
	} {
		_, err := decodeClaims([]byte(payload))
		if !errors.Is(err, ErrMalformed) || strings.Contains(err.Error(), "secret") {
			t.Errorf("decodeClaims(%s) = %v", payload, err)
		}
	}
	if _, err := decodeClaims([]byte(`{"exp":"x"}`)); err == nil || !strings.Contains(err.Error(), "ill-typed exp claim") {
		t.Errorf("an ill-typed known claim is named: %v", err)
	}
}
