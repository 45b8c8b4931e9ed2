package grant

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/golang-jwt/jwt/v5"
)

// Grants are read strictly. encoding/json, which golang-jwt decodes claims with, matches
// member names to struct fields case-insensitively, unescapes them, and lets the last of
// two equal names win: {"EXP":…}, {"\u0065xp":…} and {"exp":1,"exp":2} all decode as if
// they said exp, and other JWT parsers read them otherwise (or refuse them). Our signer
// writes none of them, so refusing them costs no genuine grant and leaves every accepted
// grant with one reading: in the header and in the payload, member names are unique at
// every depth and written without escapes, and the payload holds only the claims the
// signer writes (claims.field), under exactly their names.
//
// Unknown claims are refused, although RFC 7519 §4 has implementations ignore claims they
// do not understand "in the absence of such requirements": a grant is a bearer credential
// whose every claim binds it, issued only by this package, so a claim this verifier does
// not know is either not ours or a binding it would fail to enforce (a later version's new
// restriction, accepted unchecked). A new claim therefore reaches verifiers before any
// signer writes it, as a new key does (docs/grants.md).

// signedPayload is what golang-jwt decodes a token's payload into: the JSON object's bytes
// and nothing more. The library checks that the payload is valid JSON and verifies the
// signature over the exact segments it came from; decodeClaims reads it, once and strictly,
// only after that. It is a jwt.Claims only so that ParseWithClaims accepts it: the parser
// runs WithoutClaimsValidation, and its getters fail if anything ever asks.
type signedPayload struct {
	raw []byte
}

// UnmarshalJSON keeps a copy of the payload (encoding/json reuses its buffer). Anything
// but an object is refused here, before the signature, as any undecodable payload is.
func (p *signedPayload) UnmarshalJSON(data []byte) error {
	if len(data) == 0 || data[0] != '{' {
		return errors.New("grant: payload is not a JSON object")
	}
	p.raw = bytes.Clone(data)
	return nil
}

// errUndecoded is what signedPayload answers as claims: nothing is read from a payload
// before decodeClaims.
var errUndecoded = errors.New("grant: claims read before their strict decoding")

func (*signedPayload) GetExpirationTime() (*jwt.NumericDate, error) { return nil, errUndecoded }
func (*signedPayload) GetIssuedAt() (*jwt.NumericDate, error)       { return nil, errUndecoded }
func (*signedPayload) GetNotBefore() (*jwt.NumericDate, error)      { return nil, errUndecoded }
func (*signedPayload) GetIssuer() (string, error)                   { return "", errUndecoded }
func (*signedPayload) GetSubject() (string, error)                  { return "", errUndecoded }
func (*signedPayload) GetAudience() (jwt.ClaimStrings, error)       { return nil, errUndecoded }

// decodeClaims decodes an authentic payload in one pass, each value straight into its
// typed field. It refuses, as ErrMalformed, anything but one object of unique, unescaped,
// known claim names with values of their claim's type. Errors name a known claim at most,
// never a value or a name the payload chose.
func decodeClaims(payload []byte) (claims, error) {
	var c claims
	dec := json.NewDecoder(bytes.NewReader(payload))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return claims{}, fmt.Errorf("%w: payload is not a JSON object", ErrMalformed)
	}
	seen := make(map[string]bool, claimCount)
	for dec.More() {
		name, err := memberName(dec, payload, seen, "claim")
		if err != nil {
			return claims{}, err
		}
		field := c.field(name)
		if field == nil {
			return claims{}, fmt.Errorf("%w: unknown claim", ErrMalformed)
		}
		if err := dec.Decode(field); err != nil {
			return claims{}, fmt.Errorf("%w: ill-typed %s claim", ErrMalformed, name)
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return claims{}, fmt.Errorf("%w: undecodable payload", ErrMalformed)
	}
	if _, err := dec.Token(); err != io.EOF {
		return claims{}, fmt.Errorf("%w: data after the payload", ErrMalformed)
	}
	return c, nil
}

// checkHeader applies the member-name rules to the header segment, at every depth: the
// library has decoded it into a map already, in which the last of two kids wins. Unknown
// parameters stay allowed and ignored (jku, x5u, jwk and x5c among them).
func checkHeader(p *jwt.Parser, segment string) error {
	data, err := p.DecodeSegment(segment)
	if err != nil {
		return fmt.Errorf("%w: undecodable header", ErrMalformed)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber() // numbers are skipped, never converted
	return checkValue(dec, data)
}

// checkValue reads one JSON value from dec, applying memberName to every object member
// within it. Recursion is bounded by MaxTokenBytes (and encoding/json's own depth limit).
func checkValue(dec *json.Decoder, data []byte) error {
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("%w: undecodable header", ErrMalformed)
	}
	switch tok {
	case json.Delim('{'):
		seen := make(map[string]bool)
		for dec.More() {
			if _, err := memberName(dec, data, seen, "header parameter"); err != nil {
				return err
			}
			if err := checkValue(dec, data); err != nil {
				return err
			}
		}
	case json.Delim('['):
		for dec.More() {
			if err := checkValue(dec, data); err != nil {
				return err
			}
		}
	default:
		return nil // a scalar
	}
	if _, err := dec.Token(); err != nil { // the closing delimiter
		return fmt.Errorf("%w: undecodable header", ErrMalformed)
	}
	return nil
}

// memberName reads the name of the next member of the object dec is inside, refusing a
// name written with escapes or already in seen. what names the kind of member in errors.
func memberName(dec *json.Decoder, data []byte, seen map[string]bool, what string) (string, error) {
	from := dec.InputOffset()
	tok, err := dec.Token()
	name, ok := tok.(string)
	if err != nil || !ok {
		return "", fmt.Errorf("%w: undecodable %s name", ErrMalformed, what)
	}
	// Between the end of the previous value and the end of the name lie only white space,
	// a comma and the quoted name: a backslash there is an escape inside the name.
	if bytes.IndexByte(data[from:dec.InputOffset()], '\\') >= 0 {
		return "", fmt.Errorf("%w: escaped %s name", ErrMalformed, what)
	}
	if seen[name] {
		return "", fmt.Errorf("%w: duplicate %s", ErrMalformed, what)
	}
	seen[name] = true
	return name, nil
}
