package fileops

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/execplane/execplane/internal/protocol"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// A kernel without openat2: OpenRoot refuses instead of falling back to string checks.
func TestKernelWithoutOpenat2IsRefused(t *testing.T) {
	saved := openat2
	t.Cleanup(func() { openat2 = saved })
	openat2 = func(int, string, *unix.OpenHow) (int, error) { return -1, unix.ENOSYS }
	if _, err := OpenRoot(t.TempDir()); !errors.Is(err, protocol.ErrUnavailable) {
		t.Fatalf("want protocol.ErrUnavailable, got %v", err)
	}
}

func TestCheckPathAndSplit(t *testing.T) {
	cases := []struct {
		in      string
		want    string
		wantErr error
	}{
		{"a/b", "a/b", nil},
		{"a/b/", "a/b", nil},
		{".", ".", nil},
		{"", "", protocol.ErrInvalid},
		{"/etc", "", protocol.ErrPathEscape},
		{"//", "", protocol.ErrPathEscape},
		{"a\x00", "", protocol.ErrInvalid},
	}
	for _, tc := range cases {
		got, err := checkPath([]byte(tc.in))
		if !errors.Is(err, tc.wantErr) || (err == nil && got != tc.want) {
			t.Errorf("checkPath(%q) = %q, %v", tc.in, got, err)
		}
	}
	for in, want := range map[string][2]string{"a": {".", "a"}, "a/b": {"a", "b"}, "a//b": {"a", "b"}, "/x": {".", "x"}} {
		parent, name, err := split(in)
		if err != nil || parent != want[0] || name != want[1] {
			t.Errorf("split(%q) = %q %q %v", in, parent, name, err)
		}
	}
	for _, in := range []string{"..", "a/..", "a/."} {
		if _, _, err := split(in); !errors.Is(err, protocol.ErrInvalid) {
			t.Errorf("split(%q) accepted", in)
		}
	}
}

// FuzzResolve throws arbitrary paths at every file operation — each path-taking field of
// each of the ten kinds — in a workspace that holds symlinks pointing outside: no operation
// may reveal the outside secret or change anything outside, whatever the path.
func FuzzResolve(f *testing.F) {
	for _, seed := range []string{"a", "../outside/secret", "link/secret", "in/../../outside/secret", "abs", "a/./b/../../link", "proc/1/root", "\xff", "x/" + string(bytes.Repeat([]byte("../"), 40))} {
		f.Add([]byte(seed), uint8(0))
	}
	base := f.TempDir()
	root, outside := filepath.Join(base, "ws"), filepath.Join(base, "outside")
	for _, d := range []string{root, outside, filepath.Join(root, "in")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			f.Fatal(err)
		}
	}
	secret := []byte("OUTSIDE-SECRET")
	if err := os.WriteFile(filepath.Join(outside, "secret"), secret, 0o644); err != nil {
		f.Fatal(err)
	}
	_ = os.Symlink(outside, filepath.Join(root, "link"))
	_ = os.Symlink(filepath.Join(outside, "secret"), filepath.Join(root, "abs"))
	_ = os.Symlink("/proc", filepath.Join(root, "proc"))
	r, err := OpenRoot(root)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { r.Close() })
	lim := Limits{MaxFileBytes: 1 << 16}
	// fixtures puts back what an input may have removed or renamed inside the root, so every
	// input meets the outward symlinks.
	fixtures := func() {
		for _, name := range []string{"copy", "moved"} {
			_ = os.RemoveAll(filepath.Join(root, name)) // each input checks its own result
		}
		_ = os.MkdirAll(filepath.Join(root, "in"), 0o755)
		_ = os.Symlink(outside, filepath.Join(root, "link"))
		_ = os.Symlink(filepath.Join(outside, "secret"), filepath.Join(root, "abs"))
		_ = os.Symlink("/proc", filepath.Join(root, "proc"))
	}
	f.Fuzz(func(t *testing.T, p []byte, op uint8) {
		fixtures()
		var fo *executionv1.FileOperation
		switch op % 12 {
		case 0:
			fo = &executionv1.FileOperation{Operation: &executionv1.FileOperation_Read{Read: &executionv1.ReadFile{Path: p}}}
		case 1:
			fo = &executionv1.FileOperation{Operation: &executionv1.FileOperation_Write{Write: &executionv1.WriteFile{Path: p, Content: []byte("w"), Mode: executionv1.WriteMode_WRITE_MODE_OVERWRITE, CreateParents: true}}}
		case 2:
			fo = &executionv1.FileOperation{Operation: &executionv1.FileOperation_Grep{Grep: &executionv1.Grep{Pattern: "SECRET", Path: p}}}
		case 3:
			fo = &executionv1.FileOperation{Operation: &executionv1.FileOperation_Copy{Copy: &executionv1.CopyPath{From: p, To: []byte("copy"), Overwrite: true}}}
		case 4:
			fo = &executionv1.FileOperation{Operation: &executionv1.FileOperation_List{List: &executionv1.ListDirectory{Path: p}}}
		case 5:
			fo = &executionv1.FileOperation{Operation: &executionv1.FileOperation_Stat{Stat: &executionv1.StatFile{Path: p}}}
		case 6:
			fo = &executionv1.FileOperation{Operation: &executionv1.FileOperation_Mkdir{Mkdir: &executionv1.MakeDirectory{Path: p, Parents: true}}}
		case 7:
			fo = &executionv1.FileOperation{Operation: &executionv1.FileOperation_Remove{Remove: &executionv1.RemovePath{Path: p, Recursive: true}}}
		case 8:
			fo = &executionv1.FileOperation{Operation: &executionv1.FileOperation_Rename{Rename: &executionv1.RenamePath{From: p, To: []byte("moved"), Overwrite: true}}}
		case 9:
			fo = &executionv1.FileOperation{Operation: &executionv1.FileOperation_Rename{Rename: &executionv1.RenamePath{From: []byte("in"), To: p}}}
		case 10:
			fo = &executionv1.FileOperation{Operation: &executionv1.FileOperation_Copy{Copy: &executionv1.CopyPath{From: []byte("in"), To: p, Recursive: true}}}
		case 11:
			fo = &executionv1.FileOperation{Operation: &executionv1.FileOperation_Glob{Glob: &executionv1.Glob{Pattern: []byte("**"), Base: p}}}
		}
		res, err := r.Do(fo, lim)
		if err == nil {
			if bytes.Contains(res.GetRead().GetContent(), secret) || len(res.GetGrep().GetMatches()) > 0 {
				t.Fatalf("path %q revealed the outside secret", p)
			}
			// Nothing inside the root has the secret's size (inputs write one byte).
			if res.GetStat().GetInfo().GetSize() == uint64(len(secret)) && res.GetStat().GetInfo().GetType() == executionv1.FileType_FILE_TYPE_REGULAR {
				t.Fatalf("path %q stat'ed the outside secret", p)
			}
			for _, e := range res.GetList().GetEntries() {
				// Inputs may create a "secret" of their own inside the root (writes put "w" in
				// it); only the outside one has the secret's size.
				if string(e.GetPath()) == "secret" && e.GetSize() == uint64(len(secret)) {
					t.Fatalf("path %q listed the outside directory", p)
				}
			}
		}
		// A file whose content was brought in. Not through a symlink: renaming or copying an
		// outward link moves the link itself, which stays refused by every operation (the
		// test reading through it would be the test escaping, not the helper).
		for _, name := range []string{"copy", "moved"} {
			info, err := os.Lstat(filepath.Join(root, name))
			if err != nil || !info.Mode().IsRegular() {
				continue
			}
			if data, err := os.ReadFile(filepath.Join(root, name)); err == nil && bytes.Contains(data, secret) {
				t.Fatalf("path %q brought the outside secret in as %s", p, name)
			}
		}
		entries, _ := os.ReadDir(outside)
		if len(entries) != 1 {
			t.Fatalf("path %q changed the outside directory", p)
		}
		if data, _ := os.ReadFile(filepath.Join(outside, "secret")); !bytes.Equal(data, secret) {
			t.Fatalf("path %q changed the outside secret", p)
		}
	})
}
