package security

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/execplane/execplane/internal/dev/precondition"

	"github.com/execplane/execplane/internal/dev/devbundle"
)

func TestLoadBundleFileCaps(t *testing.T) {
	f := newFixture(t)
	huge := make([]byte, MaxCABundleBytes+1)
	f.write(devbundle.CACertFile, huge)
	_, err := f.load()
	wantProblems(t, err, fmt.Sprintf("clientCABundle: larger than %d bytes", MaxCABundleBytes))

	f.write(devbundle.ManifestFile, append(f.read(devbundle.ManifestFile), make([]byte, MaxManifestBytes)...))
	if _, err := f.load(); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("oversized manifest: %v", err)
	}
}

func TestLoadBundleRefusesSpecialFiles(t *testing.T) {
	f := newFixture(t)
	if err := os.Remove(f.path(devbundle.CACertFile)); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(f.path(devbundle.CACertFile), 0o600); err != nil {
		precondition.Missing(t, "mkfifo: %v", err)
	}
	done := make(chan error, 1)
	go func() { _, err := f.load(); done <- err }()
	select {
	case err := <-done:
		wantProblems(t, err, "clientCABundle: not a regular file")
	case <-time.After(5 * time.Second):
		t.Fatal("LoadBundle hangs on a FIFO")
	}
}

func TestLoadBundleSymlinkOutsideRefused(t *testing.T) {
	f := newFixture(t)
	outside := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(outside, f.read(devbundle.CACertFile), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(f.path(devbundle.CACertFile)); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, f.path(devbundle.CACertFile)); err != nil {
		t.Fatal(err)
	}
	_, err := f.load()
	wantProblems(t, err, "clientCABundle:")
}

// TestLoadBundleProjectedVolume lays a bundle out as the kubelet does (every name a symlink
// into ..data, ..data a symlink to a timestamped snapshot) and checks that a load reads one
// snapshot, and that after the ..data swap the next load reads the new one.
func TestLoadBundleProjectedVolume(t *testing.T) {
	vol := t.TempDir()
	snapshot := func(name string, gen uint64) {
		res, err := devbundle.Generate(filepath.Join(vol, name), devbundle.Options{Generation: gen})
		if err != nil {
			t.Fatal(err)
		}
		_ = res
	}
	snapshot("..2026_11_29_10_00_00.1", 1)
	if err := os.Symlink("..2026_11_29_10_00_00.1", filepath.Join(vol, "..data")); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(filepath.Join(vol, "..2026_11_29_10_00_00.1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if err := os.Symlink(filepath.Join("..data", e.Name()), filepath.Join(vol, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	manifest := filepath.Join(vol, devbundle.ManifestFile)
	b1, err := LoadBundle(manifest, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if b1.Generation() != 1 || filepath.Base(b1.Dir()) != "..2026_11_29_10_00_00.1" {
		t.Fatalf("read generation %d from %s", b1.Generation(), b1.Dir())
	}

	// The kubelet writes the next snapshot, then swaps ..data atomically with a rename.
	snapshot("..2026_11_29_10_05_00.2", 2)
	tmp := filepath.Join(vol, "..data_tmp")
	if err := os.Symlink("..2026_11_29_10_05_00.2", tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(vol, "..data")); err != nil {
		t.Fatal(err)
	}
	b2, err := LoadBundle(manifest, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if b2.Generation() != 2 || b2.Digest() == b1.Digest() {
		t.Fatalf("after the swap: generation %d", b2.Generation())
	}
}
