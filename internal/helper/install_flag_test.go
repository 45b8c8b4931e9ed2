package helper_test

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// The static helper binary installs itself through its flag (as the init container runs it).
func TestInstallFlag(t *testing.T) {
	bin := helperBin // make test's bin/helper, or the one TestMain built
	dest := filepath.Join(t.TempDir(), "helper")
	if out, err := exec.Command(bin, "--install", dest).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if out, err := exec.Command(dest, "--version").CombinedOutput(); err != nil {
		t.Fatalf("the installed copy does not run: %v\n%s", err, out)
	}
}
