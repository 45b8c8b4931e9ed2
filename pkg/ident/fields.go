package ident

import (
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/execplane/execplane/pkg/apierror"
)

// Bounds of request fields beside the identifier forms (docs/api.md, "Identifiers").
const (
	// MaxOwnerField bounds an owner's issuer and subject.
	MaxOwnerField = 256
	// MaxReason bounds an administrative reason: it reaches Events and logs.
	MaxReason = 256
	// MaxPageToken bounds an opaque page token.
	MaxPageToken = 1024
	// MaxPageSize bounds a page of a listing.
	MaxPageSize = 500
	// Metadata bounds: a caller's labels (E2B's sandbox metadata, a platform's tags), not a
	// document store. Each environment's is in its resource and in every listing page, so
	// 4 KiB × 500 per page stays within a gRPC message.
	MaxMetadataEntries = 32
	MaxMetadataKey     = 64
	MaxMetadataValue   = 512
	MaxMetadataBytes   = 4 << 10
	// Deadline bounds: a second is the clock's resolution in practice (the controller wakes
	// at it); a year is the longest time limit a profile may set.
	MinDeadline = time.Second
	MaxDeadline = 8760 * time.Hour
)

// Fields checks a request's fields in order and keeps the first problem, as
// apierror.ErrInvalidArgument naming the field and its rule, never the value. The gateway
// runs it on every request before anything is forwarded; the store runs it again (it is
// importable on its own and trusts no caller).
type Fields struct{ err error }

// Err is the first problem found, or nil.
func (f *Fields) Err() error { return f.err }

// Fail records that field breaks rule (unless a problem was already found).
func (f *Fields) Fail(field, rule string) {
	if f.err == nil {
		f.err = fmt.Errorf("%w: %s: %s", apierror.ErrInvalidArgument, field, rule)
	}
}

// Identifier requires an identifier (IsIdentifier).
func (f *Fields) Identifier(field, s string) {
	if !IsIdentifier(s) {
		f.Fail(field, fmt.Sprintf("must be 1..%d bytes of [A-Za-z0-9._:-], not starting with '.' or '-'", MaxIdentifier))
	}
}

// DNSLabel requires a DNS-1123 label.
func (f *Fields) DNSLabel(field, s string) {
	if !IsDNSLabel(s) {
		f.Fail(field, "must be a DNS-1123 label")
	}
}

// UUID requires a canonical lowercase UUID.
func (f *Fields) UUID(field, s string) {
	if !IsUUID(s) {
		f.Fail(field, "must be a canonical UUID")
	}
}

// Owner requires an owner's issuer and subject, each 1..MaxOwnerField bytes of printable
// ASCII.
func (f *Fields) Owner(field, issuer, subject string) {
	if !IsPrintableASCII(issuer, MaxOwnerField) {
		f.Fail(field+".issuer", fmt.Sprintf("must be 1..%d bytes of printable ASCII", MaxOwnerField))
	}
	if !IsPrintableASCII(subject, MaxOwnerField) {
		f.Fail(field+".subject", fmt.Sprintf("must be 1..%d bytes of printable ASCII", MaxOwnerField))
	}
}

// Ref requires an environment reference: a DNS-1123 label id and a canonical UUID revision.
func (f *Fields) Ref(field string, r EnvironmentRef) {
	f.DNSLabel(field+".id", r.Name)
	f.UUID(field+".revision", r.UID)
}

// Reason allows an empty reason or at most MaxReason bytes of printable text (spaces too).
func (f *Fields) Reason(s string) {
	if len(s) > MaxReason || (s != "" && !IsText(s)) {
		f.Fail("reason", fmt.Sprintf("must be at most %d bytes of printable text", MaxReason))
	}
}

// Digest allows an empty digest or a profile digest (IsDigest).
func (f *Fields) Digest(field, s string) {
	if s != "" && !IsDigest(s) {
		f.Fail(field, "must be sha256: and 64 lowercase hex digits")
	}
}

// PageToken allows an empty token or at most MaxPageToken bytes of printable ASCII.
func (f *Fields) PageToken(field, s string) {
	if s != "" && !IsPrintableASCII(s, MaxPageToken) {
		f.Fail(field, "is not a token this API issued")
	}
}

// PageSize allows 0 (the default) to MaxPageSize.
func (f *Fields) PageSize(field string, n int) {
	if n < 0 || n > MaxPageSize {
		f.Fail(field, fmt.Sprintf("must be 0..%d", MaxPageSize))
	}
}

// Metadata requires a caller's metadata within the bounds: identifier keys, UTF-8 values.
func (f *Fields) Metadata(field string, m map[string]string) {
	if len(m) > MaxMetadataEntries {
		f.Fail(field, fmt.Sprintf("must have at most %d entries", MaxMetadataEntries))
		return
	}
	total := 0
	for k, v := range m {
		total += len(k) + len(v)
		switch {
		case len(k) > MaxMetadataKey || !IsIdentifier(k):
			f.Fail(field, fmt.Sprintf("keys must be identifiers of at most %d bytes", MaxMetadataKey))
		case len(v) > MaxMetadataValue || !utf8.ValidString(v):
			f.Fail(field, fmt.Sprintf("values must be UTF-8 of at most %d bytes", MaxMetadataValue))
		}
	}
	if total > MaxMetadataBytes {
		f.Fail(field, fmt.Sprintf("must be at most %d bytes in all", MaxMetadataBytes))
	}
}

// Deadline requires a deadline's distance within MinDeadline..MaxDeadline.
func (f *Fields) Deadline(field string, d time.Duration) {
	if d < MinDeadline || d > MaxDeadline {
		f.Fail(field, fmt.Sprintf("must be %s..%s", MinDeadline, MaxDeadline))
	}
}

// IsText: printable ASCII and spaces (0x20..0x7e).
func IsText(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
