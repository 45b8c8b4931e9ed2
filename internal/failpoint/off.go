//go:build !failpoint

package failpoint

// Enabled reports whether this binary was built with failpoints.
const Enabled = false

// Inject does nothing: this binary has no failpoints.
func Inject(string) {}
