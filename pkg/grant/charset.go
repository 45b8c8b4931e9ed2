package grant

import (
	"strings"

	"github.com/execplane/execplane/pkg/ident"
)

// The character-set checks of this file are hand-written loops rather than regular
// expressions: they run on untrusted input (the kid) on every verification, and a loop is
// obviously linear and allocation-free.

// jsonEscapedASCII lists the printable ASCII characters encoding/json escapes (quote and
// backslash always; <, > and & as HTML-safe \u escapes). Free-form claims refuse them so
// that a claim's encoded size equals its length and tokens stay within MaxTokenBytes.
const jsonEscapedASCII = `"\<>&`

// ValidKeyID reports whether kid is a well-formed key id: 1..MaxKeyIDBytes bytes of
// [A-Za-z0-9._-]. The verifier checks it before any lookup, so a hostile kid (a path, a
// NUL, a megabyte) goes no further than this loop.
func ValidKeyID(kid string) bool {
	if len(kid) == 0 || len(kid) > MaxKeyIDBytes {
		return false
	}
	for i := 0; i < len(kid); i++ {
		c := kid[i]
		if !isAlnum(c) && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

// The API's identifier forms are internal/ident's, so that the store and the grants agree.
var (
	isIdentifier = ident.IsIdentifier
	isDNSLabel   = ident.IsDNSLabel
	isUUID       = ident.IsUUID
)

// isLowerHex reports whether s is exactly n lowercase hex digits.
func isLowerHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isLowerHexDigit(s[i]) {
			return false
		}
	}
	return true
}

// isPrintableASCII reports whether s is 1..limit bytes of printable ASCII (0x21..0x7e).
var isPrintableASCII = ident.IsPrintableASCII

// isJSONSafe reports whether s is printable ASCII that encoding/json copies unescaped.
func isJSONSafe(s string, limit int) bool {
	return isPrintableASCII(s, limit) && !strings.ContainsAny(s, jsonEscapedASCII)
}

// isCompactJWS reports whether s has the shape of a compact JWS: three non-empty segments of
// unpadded base64url separated by exactly two dots. Go's base64 decoder skips '\r' and '\n'
// even in strict mode, so without this check a line break inside the signature segment
// would yield a second string that verifies as the same token.
func isCompactJWS(s string) bool {
	dots, segment := 0, 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '.':
			if segment == 0 {
				return false
			}
			dots++
			segment = 0
		case isAlnum(c) || c == '-' || c == '_':
			segment++
		default:
			return false
		}
	}
	return dots == 2 && segment > 0
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func isLowerHexDigit(c byte) bool {
	return c >= 'a' && c <= 'f' || c >= '0' && c <= '9'
}
