// Package execctl is the command-line client for callers and operators.
//
// It is what they install, so it links nothing of the development rooms (internal/dev/…):
// the local stack of make demo and its tools are execplane-dev's (internal/dev/devcmd), and
// test/layout fails when cmd/execctl reaches anything under internal/dev.
package execctl
