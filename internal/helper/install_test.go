package helper

import (
	"bytes"
	"os"
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
	if fi, _ := os.Stat(dest); fi.Mode().Perm() != 0o111 {
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
