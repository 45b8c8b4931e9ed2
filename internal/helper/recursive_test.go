package helper_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// snapshot lists every path beneath root with its type and size: what a refusal must leave
// exactly as it was.
func snapshot(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		size := info.Size()
		if d.IsDir() {
			size = 0
		}
		out = append(out, fmt.Sprintf("%s %s %d", rel, info.Mode().Type(), size))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// deepTree makes levels nested directories under root/name and returns the innermost.
func deepTree(t *testing.T, root, name string, levels int) string {
	t.Helper()
	p := filepath.Join(root, name, strings.Repeat("d/", levels-1)+"d")
	must(t, os.MkdirAll(p, 0o755))
	return p
}

// A recursive copy or remove refused partway — by a byte, entry or depth bound found deep
// in the tree — leaves the workspace byte-for-byte as it was: no partial destination, no
// temporary tree, nothing removed.
func TestRefusedRecursiveOperationsLeaveNothingBehind(t *testing.T) {
	for _, c := range []struct {
		name string
		tree func(t *testing.T, root string)
		op   *executionv1.FileOperation
	}{
		{"copy over the byte bound, found at the last file", func(t *testing.T, root string) {
			must(t, os.MkdirAll(filepath.Join(root, "src", "a", "b"), 0o755))
			for i, n := range []int{10, 20, 30} {
				must(t, os.WriteFile(filepath.Join(root, "src", "a", fmt.Sprintf("small%d", i)), make([]byte, n), 0o644))
			}
			must(t, os.WriteFile(filepath.Join(root, "src", "a", "b", "zz-big"), make([]byte, testMaxFileBytes), 0o644))
		}, copyOp("src", "dst", true)},
		{"copy deeper than the depth bound", func(t *testing.T, root string) {
			must(t, os.WriteFile(filepath.Join(deepTree(t, root, "src", 300), "f"), []byte("x"), 0o644))
		}, copyOp("src", "dst", true)},
		{"remove deeper than the depth bound", func(t *testing.T, root string) {
			must(t, os.WriteFile(filepath.Join(root, "keep-sibling"), []byte("x"), 0o644))
			must(t, os.MkdirAll(filepath.Join(root, "tree", "a-shallow"), 0o755))
			for i := range 20 { // entries a remove that does not count first would take before the deep part
				must(t, os.WriteFile(filepath.Join(root, "tree", fmt.Sprintf("f-%02d", i)), nil, 0o644))
			}
			must(t, os.WriteFile(filepath.Join(root, "tree", "a-shallow", "f"), []byte("x"), 0o644))
			deepTree(t, root, "tree/z-deep", 300)
		}, removeOp("tree", true)},
	} {
		t.Run(c.name, func(t *testing.T) {
			root, outside := workspace(t)
			c.tree(t, root)
			before := snapshot(t, root)
			wantCode(t, root, c.op, codeExhaust)
			if diff := cmp.Diff(before, snapshot(t, root)); diff != "" {
				t.Errorf("the refused operation changed the workspace (-before +after):\n%s", diff)
			}
			assertOutsideUntouched(t, outside)
		})
	}
}

// What the file API copies stays within what it can remove: a tree copied at the deepest
// the copy allows is removed whole, and so is its source.
func TestACopiedTreeIsRemovable(t *testing.T) {
	root, _ := workspace(t)
	must(t, os.WriteFile(filepath.Join(deepTree(t, root, "src", 255), "f"), []byte("x"), 0o644))
	mustFile(t, root, copyOp("src", "dst", true))
	for _, p := range []string{"dst", "src"} {
		mustFile(t, root, removeOp(p, true))
	}
	if got := snapshot(t, root); !cmp.Equal(got, []string{". d--------- 0"}) {
		t.Fatalf("left behind: %v", got)
	}
}

// A directory copied into itself is refused before anything is made (it would otherwise
// recurse to the depth bound).
func TestCopyIntoItselfRefused(t *testing.T) {
	root, _ := workspace(t)
	must(t, os.MkdirAll(filepath.Join(root, "x", "sub"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "x", "f"), []byte("x"), 0o644))
	before := snapshot(t, root)
	for _, to := range []string{"x/copy", "x/sub/copy"} {
		wantCode(t, root, copyOp("x", to, true), codeInvalid)
	}
	if diff := cmp.Diff(before, snapshot(t, root)); diff != "" {
		t.Errorf("the refused copy changed the workspace (-before +after):\n%s", diff)
	}
	mustFile(t, root, copyOp("x/sub", "x/sub-copy", true)) // a sibling inside the same parent is fine
}
