// Package execctl is the command-line client for callers and operators.
//
// This package currently holds the global flags (the connection to a gateway and the output
// format) and the version command; the commands are delivered by the SDK/CLI issue.
package execctl
