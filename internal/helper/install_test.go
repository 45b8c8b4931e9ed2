package helper

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

func TestInstallCopiesTheHelper(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(t.TempDir(), "helper")
	if err := Install(dest); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(dest)
	want, _ := os.ReadFile(self)
	if !bytes.Equal(got, want) {
		t.Fatal("the copy differs from the running executable")
	}
	if fi, _ := os.Stat(dest); fi.Mode().Perm() != 0o555 {
		t.Fatalf("mode %v", fi.Mode())
	}
	for _, bad := range []string{"relative/helper", "/tmp/../helper", ""} {
		if err := Install(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if err := Install(filepath.Join(t.TempDir(), "missing-dir", "helper")); err == nil {
		t.Error("a missing directory accepted")
	}
}

// The static helper binary installs itself through its flag (as the init container runs it).
func TestInstallFlag(t *testing.T) {
	bin := os.Getenv("EXECPLANE_HELPER_BIN")
	if bin == "" {
		t.Skip("EXECPLANE_HELPER_BIN not set (make test sets it)")
	}
	dest := filepath.Join(t.TempDir(), "helper")
	if out, err := exec.Command(bin, "--install", dest).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if out, err := exec.Command(dest, "--version").CombinedOutput(); err != nil {
		t.Fatalf("the installed copy does not run: %v\n%s", err, out)
	}
}
