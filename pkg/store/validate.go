package store

import (
	"fmt"
	"time"

	"github.com/execplane/execplane/pkg/ident"
)

// Bounds of inputs (docs/api.md, "Identifiers").
const (
	maxIdentifier  = ident.MaxIdentifier
	maxOwnerField  = 256
	maxReason      = 256
	maxPageToken   = 1024
	maxPageSize    = 500
	defPageSize    = 100
	maxClientIdent = 2048
)

// Run claim lifetimes: long enough to outlive a slow renewal, short enough that a vanished
// client's claim lapses within minutes.
const (
	MinRunTTL     = 30 * time.Second
	MaxRunTTL     = 5 * time.Minute
	DefaultRunTTL = time.Minute
)

type checker struct{ err error }

func (c *checker) fail(field, rule string) {
	if c.err == nil {
		c.err = invalid(field, rule)
	}
}

func (c *checker) identifier(field, s string) {
	if !isIdentifier(s) {
		c.fail(field, fmt.Sprintf("must be 1..%d bytes of [A-Za-z0-9._:-], not starting with '.' or '-'", maxIdentifier))
	}
}

func (c *checker) dnsLabel(field, s string) {
	if !isDNSLabel(s) {
		c.fail(field, "must be a DNS-1123 label")
	}
}

func (c *checker) uuid(field, s string) {
	if !isUUID(s) {
		c.fail(field, "must be a canonical UUID")
	}
}

func (c *checker) caller(k Caller) {
	// The controller resolved it from an authenticated certificate; this is defence in depth.
	if !isPrintable(k.Client, maxClientIdent) {
		c.fail("caller", "must be a client identity")
	}
}

func (c *checker) owner(field string, o Owner) {
	if !isPrintable(o.Issuer, maxOwnerField) {
		c.fail(field+".issuer", fmt.Sprintf("must be 1..%d bytes of printable ASCII", maxOwnerField))
	}
	if !isPrintable(o.Subject, maxOwnerField) {
		c.fail(field+".subject", fmt.Sprintf("must be 1..%d bytes of printable ASCII", maxOwnerField))
	}
}

func (c *checker) ref(field string, r ident.EnvironmentRef) {
	c.dnsLabel(field+".id", r.Name)
	c.uuid(field+".revision", r.UID)
}

func (c *checker) reason(s string) {
	if len(s) > maxReason || (s != "" && !isText(s)) {
		c.fail("reason", fmt.Sprintf("must be at most %d bytes of printable text", maxReason))
	}
}

func (c *checker) ttl(d time.Duration) {
	if d != 0 && (d < MinRunTTL || d > MaxRunTTL) {
		c.fail("ttl", fmt.Sprintf("must be between %s and %s", MinRunTTL, MaxRunTTL))
	}
}

var (
	isIdentifier = ident.IsIdentifier
	isDNSLabel   = ident.IsDNSLabel
	isUUID       = ident.IsUUID
	isPrintable  = ident.IsPrintableASCII
)

// isText allows printable ASCII and spaces: reasons reach Events and logs.
func isText(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
