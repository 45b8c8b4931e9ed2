package store

import (
	"fmt"
	"time"

	"github.com/execplane/execplane/pkg/ident"
)

// Bounds of inputs (docs/api.md, "Identifiers"); the forms and most bounds are pkg/ident's,
// shared with the gateway, which checks the same fields before it forwards anything.
const (
	maxPageToken   = ident.MaxPageToken
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

// checker is the shared field checker plus the store's own inputs.
type checker struct{ ident.Fields }

func (c *checker) caller(k Caller) {
	// The controller resolved it from an authenticated certificate; this is defence in depth.
	if !ident.IsPrintableASCII(k.Client, maxClientIdent) {
		c.Fail("caller", "must be a client identity")
	}
}

func (c *checker) owner(field string, o Owner) { c.Owner(field, o.Issuer, o.Subject) }

func (c *checker) ttl(d time.Duration) {
	if d != 0 && (d < MinRunTTL || d > MaxRunTTL) {
		c.Fail("ttl", fmt.Sprintf("must be between %s and %s", MinRunTTL, MaxRunTTL))
	}
}
