package fileops

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/execplane/execplane/internal/protocol"
)

// describe lists a tree as path → what a mirror must carry over: type, permission bits,
// size, checksum and modification time of files, text of symlinks; FIFOs as "fifo".
func describe(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			text, err := os.Readlink(p)
			if err != nil {
				return err
			}
			out[rel] = "symlink " + text
		case info.IsDir():
			out[rel] = fmt.Sprintf("dir %o", info.Mode().Perm())
		case info.Mode().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(data)
			out[rel] = fmt.Sprintf("file %o %d %s %d", info.Mode().Perm(), info.Size(), hex.EncodeToString(sum[:8]), info.ModTime().UnixNano())
		default:
			out[rel] = "special"
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Directories' times move as the walk reads them; their permissions are compared.
	return out
}

func mirrorDirs(t *testing.T, src, dst string, maxEntries int) (MirrorResult, error) {
	t.Helper()
	s, err := OpenRoot(src)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	d, err := OpenRoot(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	return Mirror(s, d, maxEntries)
}

func write(t *testing.T, p, content string, mode os.FileMode, mtime time.Time) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, mtime, mtime); err != nil {
		t.Fatal(err)
	}
}

// workspace builds a source tree with every kind of entry a mirror meets.
func workspace(t *testing.T) string {
	t.Helper()
	src := t.TempDir()
	when := time.Date(2026, 12, 1, 10, 0, 0, 123456789, time.UTC)
	write(t, filepath.Join(src, "README"), "hello\n", 0o644, when)
	write(t, filepath.Join(src, "bin/run.sh"), "#!/bin/sh\necho run\n", 0o755, when.Add(time.Second))
	write(t, filepath.Join(src, "a/b/c/deep.txt"), "deep", 0o600, when.Add(2*time.Second))
	write(t, filepath.Join(src, "empty"), "", 0o640, when)
	write(t, filepath.Join(src, "big.bin"), string(make([]byte, 3<<20)), 0o644, when)
	// A user's file whose name starts like the helper's temporaries: carried.
	write(t, filepath.Join(src, ".execplane-notes"), "mine", 0o644, when)
	// The helper's own uncommitted temporary: not carried.
	write(t, filepath.Join(src, "a", tempPrefix+"0123456789abcdef.tmp"), "half", 0o600, when)
	// The durable commands' records at the root: not carried; the same name deeper is a
	// user's directory like any other.
	write(t, filepath.Join(src, protocol.ReservedDir, "cmd-1", "record"), "record", 0o600, when)
	write(t, filepath.Join(src, "a", protocol.ReservedDir, "kept"), "kept", 0o600, when)
	for name, target := range map[string]string{"link-rel": "a/b", "link-abs": "/etc/passwd", "dangling": "nowhere/at/all", "up": "../../.."} {
		if err := os.Symlink(target, filepath.Join(src, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mkfifo(filepath.Join(src, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(src, "locked"), 0o500); err != nil {
		t.Fatal(err)
	}
	return src
}

// want is the source's description less what a mirror does not carry.
func want(t *testing.T, src string) map[string]string {
	d := describe(t, src)
	for k := range maps.Keys(d) {
		if k == "fifo" || k == protocol.ReservedDir || filepath.Dir(k) == protocol.ReservedDir || filepath.Dir(filepath.Dir(k)) == protocol.ReservedDir ||
			filepath.Base(k) == tempPrefix+"0123456789abcdef.tmp" {
			delete(d, k)
		}
	}
	return d
}

func sameTree(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if got[k] != want[k] {
			t.Errorf("%s: %s is %q, want %q", what, k, got[k], want[k])
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: %s (%q) should not be there", what, k, got[k])
		}
	}
}

func TestMirrorCopiesAWorkspace(t *testing.T) {
	src, dst := workspace(t), t.TempDir()
	res, err := mirrorDirs(t, src, dst, 0)
	if err != nil {
		t.Fatal(err)
	}
	sameTree(t, "the mirror", describe(t, dst), want(t, src))
	// 7 regular files (README, run.sh, deep.txt, empty, big.bin, .execplane-notes, kept).
	if res.Copied != 7 || res.Special != 1 || res.Bytes != uint64(3<<20+len("hello\n#!/bin/sh\necho run\ndeepminekept")) || res.Unchanged != 0 || res.Removed != 0 {
		t.Errorf("result %+v", res)
	}
	// Symlinks were copied as text, never followed: nothing of /etc came in.
	if text, err := os.Readlink(filepath.Join(dst, "link-abs")); err != nil || text != "/etc/passwd" {
		t.Errorf("link-abs: %q %v", text, err)
	}
}

// A mirror cut short and run again, over a target changed meanwhile, ends equal to the
// source, writing only what differs and removing what the source does not hold.
func TestMirrorResumes(t *testing.T) {
	src, dst := workspace(t), t.TempDir()
	if _, err := mirrorDirs(t, src, dst, 0); err != nil {
		t.Fatal(err)
	}
	// Damage: a truncated file, a same-size file with other bytes and an older time, a
	// directory where a file was, a file where a directory was, extras, a leftover
	// temporary, the records directory, a symlink pointing elsewhere.
	if err := os.Truncate(filepath.Join(dst, "big.bin"), 1<<20); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dst, "README"), "HELLO\n", 0o644, time.Unix(1, 0))
	if err := os.Remove(filepath.Join(dst, "empty")); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dst, "empty", "inside"), "x", 0o644, time.Unix(1, 0))
	if err := os.RemoveAll(filepath.Join(dst, "bin")); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dst, "bin"), "not a dir", 0o644, time.Unix(1, 0))
	write(t, filepath.Join(dst, "extra/deeper/file"), "extra", 0o644, time.Unix(1, 0))
	write(t, filepath.Join(dst, "a", tempPrefix+"fedcba9876543210.tmp"), "half", 0o600, time.Unix(1, 0))
	write(t, filepath.Join(dst, protocol.ReservedDir, "cmd-9", "record"), "forged", 0o600, time.Unix(1, 0))
	if err := os.Remove(filepath.Join(dst, "link-rel")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/", filepath.Join(dst, "link-rel")); err != nil {
		t.Fatal(err)
	}
	res, err := mirrorDirs(t, src, dst, 0)
	if err != nil {
		t.Fatal(err)
	}
	sameTree(t, "the mirror run again", describe(t, dst), want(t, src))
	// Written again: big.bin, README, empty, run.sh (its directory was a file); the rest
	// (deep.txt, .execplane-notes, kept, and three of four symlinks) found equal.
	if res.Copied != 4 || res.Unchanged != 6 {
		t.Errorf("result %+v: want 4 files copied and 6 entries unchanged", res)
	}
	// Run a third time: nothing to do.
	if res, err = mirrorDirs(t, src, dst, 0); err != nil || res.Copied != 0 || res.Removed != 0 {
		t.Errorf("a mirror of an equal tree: %+v %v", res, err)
	}
}

// A source of more entries than the bound is refused.
func TestMirrorBoundsEntries(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	for i := range 10 {
		write(t, filepath.Join(src, fmt.Sprintf("f%d", i)), "x", 0o644, time.Unix(1, 0))
	}
	if _, err := mirrorDirs(t, src, dst, 9); !errors.Is(err, protocol.ErrExhausted) {
		t.Fatalf("10 entries over a bound of 9: %v", err)
	}
	if _, err := mirrorDirs(t, src, dst, 10); err != nil {
		t.Fatalf("10 entries within a bound of 10: %v", err)
	}
}

// The temporary names the mirror passes by are exactly the helper's.
func TestIsTempName(t *testing.T) {
	for name, want := range map[string]bool{
		stagingName(): true, tempPrefix + "0123456789abcdef.tmp": true,
		tempPrefix + "0123456789abcdeg.tmp": false, tempPrefix + "0123.tmp": false, tempPrefix + "notes": false,
		"0123456789abcdef.tmp": false, tempPrefix + "0123456789abcdef": false,
	} {
		if got := isTempName(name); got != want {
			t.Errorf("isTempName(%q) = %v", name, got)
		}
	}
}
