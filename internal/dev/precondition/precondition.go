// Package precondition is for tests that need something of the machine (root, a tmpfs, a
// writable memory cgroup, a FIFO): where it is missing they skip, saying what is missing —
// except under CI=true, where a missing precondition fails the test, so that CI never
// reports as proven what it did not run.
package precondition

import (
	"fmt"
	"os"
	"testing"
)

// CIEnv is the variable CI sets to "true" (.ci/run does).
const CIEnv = "CI"

// Missing skips t because what it needs is missing — or, under CI=true, fails it.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv(CIEnv) == "true" {
		t.Fatalf("precondition missing under %s=true (the test would prove nothing): %s", CIEnv, msg)
	}
	t.Skip(msg)
}
