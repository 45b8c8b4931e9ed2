package fileops

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/execplane/execplane/internal/protocol"
)

// branchyDeepTree builds, beneath a new directory "top" in dirfd, a chain of levels
// directories with a file at every level and, every sideEvery levels, a side chain of
// sideLevels directories ending in a file: the count must climb back out of every side
// chain (through "..", once it is deeper than the descriptors it keeps) to the main chain,
// and the removal must move up what lies at each multiple of maxDepth. It returns the
// number of entries beneath top. Built with one descriptor at a time: no path is longer
// than a name.
func branchyDeepTree(t *testing.T, dirfd, levels, sideEvery, sideLevels int) int {
	t.Helper()
	entries := 0
	mkdir := func(fd int, name string) int {
		t.Helper()
		if err := unix.Mkdirat(fd, name, 0o755); err != nil {
			t.Fatal(err)
		}
		sub, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		return sub
	}
	file := func(fd int) {
		t.Helper()
		f, err := unix.Openat(fd, "f", unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		unix.Close(f)
		entries++
	}
	fd := mkdir(dirfd, "top")
	for level := 1; level <= levels; level++ {
		file(fd)
		if level%sideEvery == 0 {
			side := mkdir(fd, "s")
			entries++
			for range sideLevels {
				next := mkdir(side, "s")
				entries++
				unix.Close(side)
				side = next
			}
			file(side)
			unix.Close(side)
		}
		next := mkdir(fd, "d")
		entries++
		unix.Close(fd)
		fd = next
	}
	unix.Close(fd)
	return entries
}

// The count reaches every entry of a tree far deeper than the descriptors it keeps, and
// refuses one entry over its limit; the removal then empties the tree whole.
func TestCountAndRemoveTreesDeeperThanTheWalkBound(t *testing.T) {
	dirfd, err := unix.Open(t.TempDir(), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dirfd)
	want := branchyDeepTree(t, dirfd, 3*maxDepth+17, maxDepth/3, maxDepth+5)
	got, err := countEntries(dirfd, "top", maxRemoveEntries)
	if err != nil || got != want {
		t.Fatalf("count: %d, %v; want %d entries", got, err, want)
	}
	if _, err := countEntries(dirfd, "top", want-1); !errors.Is(err, protocol.ErrExhausted) {
		t.Fatalf("count over the limit: want RESOURCE_EXHAUSTED, got %v", err)
	}
	removed, err := removeTree(dirfd, "top")
	if err != nil || removed != uint64(want) {
		t.Fatalf("remove: %d, %v; want %d entries", removed, err, want)
	}
	if err := unix.Unlinkat(dirfd, "top", unix.AT_REMOVEDIR); err != nil {
		t.Fatalf("the emptied top: %v", err)
	}
}
