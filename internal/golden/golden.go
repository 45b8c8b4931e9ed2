// Package golden compares test output with reviewed files under testdata, rewriting them
// with -update (each test package declares the flag and passes it in).
package golden

import (
	"os"
	"testing"
)

// Check fails t unless got equals the file at path; with update it first writes got there.
func Check(t testing.TB, path, got string, update bool) {
	t.Helper()
	if update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (review, then run with -update):\n--- got ---\n%s", path, got)
	}
}
