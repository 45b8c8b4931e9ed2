package debroot

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const sumA = "82130bb6a560cd2a7234d8018baf73f188f5dd56413d5aa0accc987b2197a6a1"

func TestParseLock(t *testing.T) {
	got, err := ParseLock([]byte("# a comment\n\ngit 1:2.39.5-0+deb12u3 amd64 " + sumA + " 7264380 http://deb.debian.org/debian/pool/main/g/git/git_2.39.5-0%2bdeb12u3_amd64.deb\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []Locked{{Name: "git", Version: "1:2.39.5-0+deb12u3", Architecture: "amd64", SHA256: sumA, Size: 7264380, URI: "http://deb.debian.org/debian/pool/main/g/git/git_2.39.5-0%2bdeb12u3_amd64.deb"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if f := got[0].FileName(); f != "git_1%3a2.39.5-0+deb12u3_amd64.deb" {
		t.Errorf("FileName = %s", f)
	}
	for name, lock := range map[string]string{
		"empty":         "# nothing\n",
		"five fields":   "git 1 amd64 " + sumA + " 1\n",
		"bad sum":       "git 1 amd64 abc 1 http://x\n",
		"bad size":      "git 1 amd64 " + sumA + " -1 http://x\n",
		"twice":         "git 1 amd64 " + sumA + " 1 http://x\ngit 2 amd64 " + sumA + " 1 http://x\n",
		"slash in name": "../git 1 amd64 " + sumA + " 1 http://x\n",
	} {
		if _, err := ParseLock([]byte(lock)); err == nil {
			t.Errorf("%s: ParseLock accepted %q", name, lock)
		}
	}
}

// TestFetched: the cache as hack/executor-debs.sh fetch leaves it.
func TestFetched(t *testing.T) {
	deb := []byte("a .deb")
	sum := sha256.Sum256(deb)
	lock := []byte("# lock\na 1:1.0 all " + hex.EncodeToString(sum[:]) + " 6 http://x/a.deb\n")
	dir := t.TempDir()
	lockPath := filepath.Join(dir, "lock")
	if err := os.WriteFile(lockPath, lock, 0o644); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(dir, "cache")
	if _, err := Fetched(lockPath, cache); !errors.Is(err, ErrNotFetched) {
		t.Fatalf("empty cache: %v, want ErrNotFetched", err)
	}
	keyed := filepath.Join(cache, lockKey(lock))
	if err := os.MkdirAll(keyed, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{".complete", "a_1%3a1.0_all.deb"} {
		if err := os.WriteFile(filepath.Join(keyed, f), deb, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := Fetched(lockPath, cache)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{filepath.Join(keyed, "a_1%3a1.0_all.deb")}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if err := os.WriteFile(got[0], []byte("changed"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Fetched(lockPath, cache); err == nil || !strings.Contains(err.Error(), "the lock says") {
		t.Errorf("a changed .deb: %v", err)
	}
}

// TestCommittedLock: the lock parses, is sorted (resolve writes it so: the same lists,
// the same bytes), is of one architecture, and names each .deb as the mirror does.
func TestCommittedLock(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "..", LockPath))
	if err != nil {
		t.Fatal(err)
	}
	locked, err := ParseLock(data)
	if err != nil {
		t.Fatalf("%s: %v", LockPath, err)
	}
	var names []string
	for _, l := range locked {
		names = append(names, l.Name)
		if l.Architecture != "all" && l.Architecture != "amd64" {
			t.Errorf("%s: architecture %s", l.Name, l.Architecture)
		}
		// The mirror drops the epoch from the file name and escapes '+' and '~'.
		_, version, _ := strings.Cut(l.Version, ":")
		if !strings.Contains(l.Version, ":") {
			version = l.Version
		}
		base := l.URI[strings.LastIndex(l.URI, "/")+1:]
		if want := l.Name + "_" + version + "_" + l.Architecture + ".deb"; unescape(base) != want {
			t.Errorf("%s: URI %s, want a file named %s", l.Name, l.URI, want)
		}
	}
	if !slices.IsSorted(names) {
		t.Errorf("the lock is not sorted by name")
	}
}

func unescape(s string) string {
	return strings.NewReplacer("%2b", "+", "%2B", "+", "%7e", "~", "%7E", "~").Replace(s)
}
