//go:build !failpoint

package failpoint

// Enabled reports whether this binary was built with failpoints.
const Enabled = false

// Inject does nothing: this binary has no failpoints.
func Inject(string) {}

// Breaks reports false: this binary breaks no guarantee.
func Breaks(string) bool { return false }
