package process

import (
	"time"

	"github.com/execplane/execplane/internal/protocol"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// The bounds of command specs are the protocol's, so the gateway refuses exactly what the
// helper would.
const (
	// MinTimeout is the shortest timeout accepted.
	MinTimeout = protocol.MinTimeout
	// MaxOutputBytesCeiling and MaxDurationCeiling are the helper's own ceilings on the
	// request's limits.
	MaxOutputBytesCeiling = protocol.MaxOutputBytesCeiling
	MaxDurationCeiling    = protocol.MaxDurationCeiling
)

// EnvAllowed reports whether a variable name is accepted.
func EnvAllowed(name string) bool { return protocol.EnvAllowed(name) }

// validate checks spec against the limits and returns the program's argv and timeout.
func validate(spec *executionv1.CommandSpec, lim Limits) (argv []string, timeout time.Duration, err error) {
	return protocol.ValidateCommand(spec, protocol.CommandLimits(lim))
}
