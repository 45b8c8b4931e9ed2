package cli

import (
	"errors"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"github.com/execplane/execplane/pkg/problem"
)

// ErrInvalidConfig wraps every configuration problem reported by a Validate method.
var ErrInvalidConfig = errors.New("invalid configuration")

// Problems collects configuration problems so that Validate reports all of them at once.
// The zero value is ready to use.
type Problems struct {
	list problem.List
}

// Addf records one problem. field is the flag name, without dashes.
func (p *Problems) Addf(field, format string, args ...any) {
	p.list.Add("--"+field, format, args...)
}

// Err returns nil when nothing was recorded, or every problem joined and wrapping
// ErrInvalidConfig.
func (p *Problems) Err() error { return p.list.Err(ErrInvalidConfig) }

// Required records a problem when value is empty.
func (p *Problems) Required(field, value string) {
	if value == "" {
		p.Addf(field, "is required")
	}
}

// Address records a problem unless value is host:port with a numeric port (host may be
// empty, meaning every interface).
func (p *Problems) Address(field, value string) {
	if value == "" {
		p.Addf(field, "is required")
		return
	}
	_, port, err := net.SplitHostPort(value)
	if err != nil {
		p.Addf(field, "%q is not host:port", value)
		return
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		p.Addf(field, "%q has no valid port", value)
	}
}

// AbsolutePath records a problem unless value is an absolute, clean path. Empty values are
// allowed when optional is true.
func (p *Problems) AbsolutePath(field, value string, optional bool) {
	switch {
	case value == "" && optional:
	case value == "":
		p.Addf(field, "is required")
	case !filepath.IsAbs(value):
		p.Addf(field, "%q is not an absolute path", value)
	case filepath.Clean(value) != value:
		p.Addf(field, "%q is not a clean path (want %q)", value, filepath.Clean(value))
	}
}

// DurationBetween records a problem unless min <= d <= max.
func (p *Problems) DurationBetween(field string, d, lo, hi time.Duration) {
	if d < lo || d > hi {
		p.Addf(field, "%s is outside [%s, %s]", d, lo, hi)
	}
}

// IntBetween records a problem unless lo <= n <= hi.
func (p *Problems) IntBetween(field string, n, lo, hi int) {
	if n < lo || n > hi {
		p.Addf(field, "%d is outside [%d, %d]", n, lo, hi)
	}
}

// OneOf records a problem unless value is one of allowed.
func (p *Problems) OneOf(field, value string, allowed ...string) {
	for _, a := range allowed {
		if value == a {
			return
		}
	}
	p.Addf(field, "%q is not one of %v", value, allowed)
}
