// Package helper is the static binary baked into executor images: one process per request,
// started through pods/exec with a fixed argv, reading one framed request from stdin and
// writing one framed response to stdout. It never listens on a socket and holds no
// credentials.
//
// This package currently holds the helper's configuration and entry point; the file
// operations and commands are delivered by the helper issue (docs/architecture.md).
package helper
