// Package ident checks the API's identifier forms (docs/api.md, "Identifiers") with
// hand-written loops: they run on untrusted input before any lookup, and a loop is
// obviously linear and allocation-free. pkg/grant and pkg/store share them, so a value one
// accepts the other accepts too. ref.go adds the one EnvironmentRef type and the client hash
// that environments and grants both carry; fields.go the request-field checker the gateway
// and the store both run (its refusals are apierror.ErrInvalidArgument).
package ident

// Bounds of the forms.
const (
	// MaxIdentifier bounds binding, operation, run and command ids.
	MaxIdentifier = 128
	// MaxDNSLabel bounds profile names and environment ids.
	MaxDNSLabel = 63
	// UUIDLength is a canonical UUID's length (environment revisions).
	UUIDLength = 36
)

// IsIdentifier: 1..128 bytes of [A-Za-z0-9._:-], not starting with '.' or '-'.
func IsIdentifier(s string) bool {
	if len(s) == 0 || len(s) > MaxIdentifier || s[0] == '.' || s[0] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isAlnum(c) && c != '.' && c != '_' && c != ':' && c != '-' {
			return false
		}
	}
	return true
}

// IsDNSLabel: a DNS-1123 label, 1..63 bytes of [a-z0-9-], alphanumeric at both ends.
func IsDNSLabel(s string) bool {
	if len(s) == 0 || len(s) > MaxDNSLabel || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isLowerAlnum(c) && c != '-' {
			return false
		}
	}
	return true
}

// IsUUID: a canonical lowercase UUID (8-4-4-4-12 hex digits).
func IsUUID(s string) bool {
	if len(s) != UUIDLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch i {
		case 8, 13, 18, 23:
			if s[i] != '-' {
				return false
			}
		default:
			if !IsLowerHexDigit(s[i]) {
				return false
			}
		}
	}
	return true
}

// IsPrintableASCII: 1..limit bytes of printable ASCII (0x21..0x7e).
func IsPrintableASCII(s string, limit int) bool {
	if len(s) == 0 || len(s) > limit {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// IsDigest: "sha256:" and 64 lowercase hex digits (profile digests).
func IsDigest(s string) bool {
	const prefix = "sha256:"
	if len(s) != len(prefix)+64 || s[:len(prefix)] != prefix {
		return false
	}
	for i := len(prefix); i < len(s); i++ {
		if !IsLowerHexDigit(s[i]) {
			return false
		}
	}
	return true
}

// IsLowerHexDigit: [0-9a-f].
func IsLowerHexDigit(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' }

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func isLowerAlnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }
