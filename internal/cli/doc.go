// Package cli is the plumbing every execplane binary's thin main shares: a signal-aware
// context, one mapping from errors to exit codes, flags that may follow a command's
// arguments, and the collector that lets a Config's Validate report every problem at once.
//
// Exit codes are part of the interface scripts depend on: 0 success, 1 a runtime failure,
// 2 a usage or configuration error (nothing was done), 130 interrupted by a signal.
package cli
