package helper_test

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/execplane/execplane/internal/protocol"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// snapshot lists every path beneath root with its type and size: what a refusal must leave
// exactly as it was. It walks by descriptor, so each entry costs one lookup of its name
// however deep it lies, and a tree deeper than a path can name is listed too.
func snapshot(t *testing.T, root string) []string {
	t.Helper()
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	must(t, err)
	defer unix.Close(fd)
	var st unix.Stat_t
	must(t, unix.Fstat(fd, &st))
	out := []string{snapshotLine(".", &st)}
	snapshotDir(t, fd, "", &out)
	return out
}

func snapshotDir(t *testing.T, fd int, rel string, out *[]string) {
	t.Helper()
	dup, err := unix.Dup(fd)
	must(t, err)
	dir := os.NewFile(uintptr(dup), "dir")
	names, err := dir.Readdirnames(-1)
	dir.Close()
	must(t, err)
	slices.Sort(names)
	for _, n := range names {
		var st unix.Stat_t
		must(t, unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW))
		p := path.Join(rel, n)
		*out = append(*out, snapshotLine(p, &st))
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			sub, err := unix.Openat(fd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			must(t, err)
			snapshotDir(t, sub, p, out)
			unix.Close(sub)
		}
	}
}

// snapshotLine is "path type size", the type as fs.FileMode prints it; directories have
// no size worth comparing.
func snapshotLine(p string, st *unix.Stat_t) string {
	var typ fs.FileMode
	size := st.Size
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		typ, size = fs.ModeDir, 0
	case unix.S_IFLNK:
		typ = fs.ModeSymlink
	case unix.S_IFIFO:
		typ = fs.ModeNamedPipe
	case unix.S_IFSOCK:
		typ = fs.ModeSocket
	case unix.S_IFCHR:
		typ = fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		typ = fs.ModeDevice
	}
	return fmt.Sprintf("%s %s %d", p, typ, size)
}

// deepTree makes levels nested directories under root/name and returns the innermost.
func deepTree(t *testing.T, root, name string, levels int) string {
	t.Helper()
	p := filepath.Join(root, name, strings.Repeat("d/", levels-1)+"d")
	must(t, os.MkdirAll(p, 0o755))
	return p
}

// A recursive copy refused partway — by a byte or depth bound found deep in the tree —
// leaves the workspace byte-for-byte as it was: no partial destination, no temporary tree.
// (A remove is refused by its entry bound only, counted before anything is removed: see
// TestATreeOverTheRemoveBoundIsRefusedWholeAndRemovedInBatches.)
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
	assertEmptyWorkspace(t, root)
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

// The bounds the API documents for one call.
const (
	removeEntries = 100_000 // a recursive remove
	copyEntries   = 10_000  // a recursive copy, beneath its top
	// pathLevels is the most directories one path names: the kernel resolves at most
	// MaxPathBytes-1 bytes (PATH_MAX counts the NUL), and "d/d/…/d" spends two bytes a level.
	pathLevels = protocol.MaxPathBytes / 2
)

// chain is the relative path of n nested directories named "d".
func chain(n int) string { return strings.Repeat("d/", n-1) + "d" }

func writeParentsOp(p, content string) *executionv1.FileOperation {
	return &executionv1.FileOperation{Operation: &executionv1.FileOperation_Write{Write: &executionv1.WriteFile{
		Path: []byte(p), Content: []byte(content), Mode: executionv1.WriteMode_WRITE_MODE_CREATE_ONLY, CreateParents: true}}}
}

// chainDepth counts the directories beneath root/top, following the one subdirectory of
// each level by descriptor (the bottom of a tree built by renames has no path).
func chainDepth(t *testing.T, root, top string) int {
	t.Helper()
	fd, err := unix.Open(filepath.Join(root, top), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	must(t, err)
	for depth := 0; ; depth++ {
		dir := os.NewFile(uintptr(fd), "dir")
		names, err := dir.Readdirnames(-1)
		must(t, err)
		var subdirs []string
		for _, n := range names {
			var st unix.Stat_t
			must(t, unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW))
			if st.Mode&unix.S_IFMT == unix.S_IFDIR {
				subdirs = append(subdirs, n)
			}
		}
		if len(subdirs) > 1 {
			dir.Close()
			t.Fatalf("level %d of %s has %d subdirectories, not a chain", depth, top, len(subdirs))
		}
		if len(subdirs) == 0 {
			dir.Close()
			return depth
		}
		next, err := unix.Openat(fd, subdirs[0], unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		dir.Close()
		must(t, err)
		fd = next
	}
}

func assertEmptyWorkspace(t *testing.T, root string) {
	t.Helper()
	if got := snapshot(t, root); !cmp.Equal(got, []string{". d--------- 0"}) {
		t.Fatalf("left behind: %v", got)
	}
}

// Nothing the file API can create is beyond what it can remove (#18): the deepest trees each
// creating operation builds — a path as long as a request takes, by mkdir with parents or by
// a write creating its parents; the deepest tree a copy takes, copied into a deep directory;
// deep trees renamed into deep trees, which no depth bounds — are each removed by one
// recursive remove of their top, and nothing is left.
func TestTheDeepestTreesTheAPIBuildsAreRemovedByOneCall(t *testing.T) {
	for _, c := range []struct {
		name string
		// build makes the tree through the API and returns its top, the objects in it (the
		// top included: what the remove reports) and the depth of the chain beneath the top,
		// or 0 when it is not a single chain.
		build func(t *testing.T, root string) (top string, objects uint64, depth int)
	}{
		{"mkdir with parents, the longest path", func(t *testing.T, root string) (string, uint64, int) {
			mustFile(t, root, mkdirOp(chain(pathLevels), true))
			return "d", pathLevels, pathLevels - 1
		}},
		{"write creating its parents, the longest path", func(t *testing.T, root string) (string, uint64, int) {
			mustFile(t, root, writeParentsOp(chain(pathLevels-1)+"/f", "x"))
			return "d", pathLevels, pathLevels - 2
		}},
		{"the deepest tree a copy takes, copied into a deep directory", func(t *testing.T, root string) (string, uint64, int) {
			const copyLevels, below = 255, 1500 // the copy's source walk refuses a 256th level
			mustFile(t, root, writeParentsOp("t/src/"+chain(copyLevels)+"/f", "x"))
			dst := "t/" + chain(below)
			mustFile(t, root, mkdirOp(dst, true))
			mustFile(t, root, copyOp("t/src", dst+"/copy", true))
			tree := uint64(1 + copyLevels + 1) // src or copy, its chain, its file
			return "t", 1 + tree + below + tree, 0
		}},
		{"deep trees renamed into deep trees", func(t *testing.T, root string) (string, uint64, int) {
			// Built bottom up: each round makes a chain and moves the tree built so far to
			// its bottom. Nothing bounds the depth but the rounds: three go past the walk
			// bound and past any path (the bottom of the result has no path).
			const rounds, n = 3, 1000
			mustFile(t, root, writeParentsOp("t0/"+chain(n)+"/f", "x"))
			objects := uint64(1 + n + 1)
			for i := 1; i < rounds; i++ {
				bottom := fmt.Sprintf("t%d/%s", i, chain(n))
				mustFile(t, root, mkdirOp(bottom, true))
				mustFile(t, root, renameOp(fmt.Sprintf("t%d", i-1), fmt.Sprintf("%s/t%d", bottom, i-1)))
				objects += 1 + n
			}
			return fmt.Sprintf("t%d", rounds-1), objects, rounds*(n+1) - 1
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			root, outside := workspace(t)
			top, objects, depth := c.build(t, root)
			if depth > 0 {
				if got := chainDepth(t, root, top); got != depth {
					t.Fatalf("built a tree %d levels deep, want %d", got, depth)
				}
			}
			res := mustFile(t, root, removeOp(top, true)).GetRemove()
			if res.GetRemoved() != objects {
				t.Errorf("removed %d objects, want %d", res.GetRemoved(), objects)
			}
			assertEmptyWorkspace(t, root)
			assertOutsideUntouched(t, outside)
		})
	}
}

// The file API builds trees with more entries than one remove takes — here copies, each
// within the copy's bound, into one tree — so the entry bound is held per call, not at
// creation: a remove over it is refused whole, with the workspace byte-for-byte as it was,
// even where every entry over the bound lies deeper than a walk keeps descriptors for. The
// same tree is then removed in bounded batches, its subtrees first, and nothing is left.
func TestATreeOverTheRemoveBoundIsRefusedWholeAndRemovedInBatches(t *testing.T) {
	if testing.Short() {
		t.Skip("copies 100,000 entries: not in -short")
	}
	root, outside := workspace(t)
	must(t, os.Mkdir(filepath.Join(root, "src"), 0o755))
	// One copy of src is copyEntries+1 objects, within the copy's bound; symlinks (copied
	// as symlinks, never followed) are the cheapest entries to copy and remove.
	for i := range copyEntries {
		must(t, os.Symlink("nowhere", filepath.Join(root, "src", fmt.Sprintf("l%05d", i))))
	}
	deep := "big/z/" + chain(300)
	mustFile(t, root, mkdirOp(deep, true))
	mustFile(t, root, writeParentsOp("big/a/f", "x")) // what a remove that does not count first would take before the deep part
	copies := removeEntries/(copyEntries+1) + 1
	for i := range copies {
		mustFile(t, root, copyOp("src", fmt.Sprintf("%s/c%02d", deep, i), true))
	}

	before := snapshot(t, root)
	wantCode(t, root, removeOp("big", true), codeExhaust)
	if after := snapshot(t, root); !slices.Equal(before, after) {
		t.Fatalf("the refused remove changed the workspace (-before +after):\n%s", cmp.Diff(before, after))
	}

	for i := range copies {
		res := mustFile(t, root, removeOp(fmt.Sprintf("%s/c%02d", deep, i), true)).GetRemove()
		if res.GetRemoved() != copyEntries+1 {
			t.Fatalf("batch %d removed %d objects, want %d", i, res.GetRemoved(), copyEntries+1)
		}
	}
	for _, p := range []string{"big", "src"} {
		mustFile(t, root, removeOp(p, true))
	}
	assertEmptyWorkspace(t, root)
	assertOutsideUntouched(t, outside)
}
