package fileops

import (
	"errors"
	"io"

	"golang.org/x/sys/unix"

	"github.com/execplane/execplane/internal/protocol"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// A recursive remove reaches any tree the file API can build. Depth is not its bound: mkdir
// with parents makes a path of MaxPathBytes (2048 levels) in one call, and rename moves a
// whole tree beneath another in one call, so depth grows without bound at O(1) per call.
// Refusing at creation would make every rename of a directory walk the tree it moves (to
// learn its depth) and the path above the destination (to learn where it lands), turning an
// O(1) call into an O(tree) one that a command can still undo a moment later; and it would
// leave trees a command built unremovable. So the remove goes as deep as the tree does,
// with bounded descriptors and stack: the count below climbs back through verified "..",
// and the removal moves what lies at maxDepth up into the top of the tree it removes.
//
// Its one bound is the entry count, the work of one call. That cannot be made symmetric at
// creation either (a tree grows by many calls, and by commands, and a rename adds a whole
// tree to another in one call: holding a tree bound on every write would cost a walk of
// every ancestor), so a tree over it is refused whole, with nothing removed, and is removed
// in bounded batches: its subtrees first, each within the bound, then its top.

// Bounds on a recursive remove.
const (
	// maxRemoveEntries bounds the entries one recursive remove takes (the API documents
	// 100000): about a second of unlinks, well inside a call's deadline.
	maxRemoveEntries = 100_000
	// maxRemoveMoves bounds the directories one remove moves up into its top. Each
	// directory moves at most once (once moved it is one level below the top), so a tree
	// within maxRemoveEntries never reaches it; it ends a remove that a command keeps
	// deepening as fast as it is flattened.
	maxRemoveMoves = maxRemoveEntries
	// direntBufBytes is the getdents(2) buffer: a few hundred names per system call, and the
	// names of one batch are all a level holds while it removes them.
	direntBufBytes = 32 << 10
)

func (r *Root) remove(req *executionv1.RemovePath) (*executionv1.RemovePathResult, error) {
	p, err := checkPath(req.GetPath())
	if err != nil {
		return nil, err
	}
	if isRoot(p) {
		return nil, errorf(helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "cannot remove the workspace root")
	}
	dirfd, name, err := r.openParent(p)
	if err != nil {
		if req.GetMissingOk() && errors.Is(err, protocol.ErrNotFound) {
			return &executionv1.RemovePathResult{}, nil
		}
		return nil, err
	}
	defer unix.Close(dirfd)
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if req.GetMissingOk() && errors.Is(err, unix.ENOENT) {
			return &executionv1.RemovePathResult{}, nil
		}
		return nil, fromErrno("stat", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if err := unix.Unlinkat(dirfd, name, 0); err != nil {
			return nil, fromErrno("unlink", err)
		}
		return &executionv1.RemovePathResult{Removed: 1}, nil
	}
	var removed uint64
	if req.GetRecursive() {
		// Counted first, to any depth, without changing anything: a tree over the entry bound
		// is refused whole, not half removed. (A tree that grows while it is removed can still
		// stop partway; what is left is within the bounds again and removable by the same
		// call.)
		if _, err := countEntries(dirfd, name, maxRemoveEntries); err != nil {
			return &executionv1.RemovePathResult{}, err
		}
		removed, err = removeTree(dirfd, name)
		if err != nil {
			return &executionv1.RemovePathResult{Removed: removed}, err
		}
	}
	if err := unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR); err != nil {
		return &executionv1.RemovePathResult{Removed: removed}, fromErrno("rmdir", err)
	}
	return &executionv1.RemovePathResult{Removed: removed + 1}, nil
}

// errTooMany is the entry bound's refusal.
func errTooMany(limit int) error {
	return errorf(helperv1.ErrorCode_ERROR_CODE_RESOURCE_EXHAUSTED,
		"more than %d entries to remove (nothing was removed; remove its subdirectories first)", limit)
}

// countEntries counts the entries beneath the directory name in parentfd, to any depth,
// never following a symlink and changing nothing, and refuses more than limit.
//
// It holds descriptors for the deepest maxDepth levels of its path only, and climbs back to
// a level it let go by opening ".." from the level below, accepted only when that is the
// directory (device and inode) it descended from — as fts(3) does. A directory a command
// moved meanwhile fails the count, and so the remove, with nothing removed: the caller may
// retry. Names not yet visited are kept per level; they are at most limit in all.
func countEntries(parentfd int, name string, limit int) (int, error) {
	c := entryCounter{limit: limit, buf: make([]byte, direntBufBytes)}
	defer c.close()
	if err := c.descend(parentfd, name); err != nil {
		return 0, fromErrno("open directory", err)
	}
	for len(c.levels) > 0 {
		cur := c.levels[len(c.levels)-1]
		if len(cur.names) == 0 {
			if err := c.ascend(); err != nil {
				return 0, err
			}
			continue
		}
		n := cur.names[len(cur.names)-1]
		cur.names = cur.names[:len(cur.names)-1]
		var st unix.Stat_t
		if err := unix.Fstatat(cur.fd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue // removed meanwhile: it was counted when read
			}
			return 0, fromErrno("stat", err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			continue
		}
		if err := c.descend(cur.fd, n); err != nil {
			if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
				continue // removed, or replaced by a file or a symlink: nothing beneath to count
			}
			return 0, fromErrno("open directory", err)
		}
	}
	return c.seen, nil
}

// countLevel is one directory on the count's path.
type countLevel struct {
	fd       int // -1 once let go (more than maxDepth levels above the deepest)
	dev, ino uint64
	names    []string // entries not visited yet
}

type entryCounter struct {
	limit, seen int
	levels      []*countLevel
	buf         []byte
}

// descend opens the directory name in dirfd as the next level and reads its names. A
// failure to open it is returned as the errno, for the caller to tell a vanished entry.
func (c *entryCounter) descend(dirfd int, name string) error {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	lv := &countLevel{fd: fd}
	c.levels = append(c.levels, lv) // before anything can fail: close releases it
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fromErrno("fstat", err)
	}
	lv.dev, lv.ino = st.Dev, st.Ino
	for {
		n, err := unix.Getdents(fd, c.buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fromErrno("read directory", err)
		}
		if n == 0 {
			break
		}
		before := len(lv.names)
		_, _, lv.names = unix.ParseDirent(c.buf[:n], -1, lv.names)
		if c.seen += len(lv.names) - before; c.seen > c.limit {
			return errTooMany(c.limit)
		}
	}
	// The open levels are a run at the deep end of the path: keep maxDepth of them.
	if i := len(c.levels) - 1 - maxDepth; i >= 0 && c.levels[i].fd >= 0 {
		unix.Close(c.levels[i].fd)
		c.levels[i].fd = -1
	}
	return nil
}

// ascend leaves the deepest level, reopening its parent through ".." if it was let go.
func (c *entryCounter) ascend() error {
	last := len(c.levels) - 1
	done := c.levels[last]
	c.levels = c.levels[:last]
	defer unix.Close(done.fd) // the deepest level is always open
	if last == 0 || c.levels[last-1].fd >= 0 {
		return nil
	}
	up := c.levels[last-1]
	fd, err := unix.Openat(done.fd, "..", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fromErrno("open directory", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Dev != up.dev || st.Ino != up.ino {
		unix.Close(fd)
		return errorf(helperv1.ErrorCode_ERROR_CODE_UNAVAILABLE, "the tree changed while it was counted (nothing was removed)")
	}
	up.fd = fd
	return nil
}

func (c *entryCounter) close() {
	for _, lv := range c.levels {
		if lv.fd >= 0 {
			unix.Close(lv.fd)
		}
	}
}

// removeTree empties the directory name in parentfd, never following a symlink, and
// reports how many entries it removed. It descends only by descriptors opened from the
// level above (never through ".."), holds at most maxDepth of them and recurses at most
// maxDepth levels: a directory it finds at that depth is moved into the top of the tree
// under a staging name, one level below the top, and emptied from there when the top is
// read again. Everything it moves stays inside the tree it removes, so a remove stopped
// partway (a command growing the tree, an I/O error) leaves one tree that the same call
// removes.
func removeTree(parentfd int, name string) (uint64, error) {
	top, err := unix.Openat(parentfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, fromErrno("open directory", err)
	}
	defer unix.Close(top)
	rm := remover{top: top, entries: maxRemoveEntries, moves: maxRemoveMoves, buf: make([]byte, direntBufBytes)}
	err = rm.empty(top, 0)
	return rm.removed, err
}

type remover struct {
	top            int // the directory being emptied, depth 0
	entries, moves int // left to remove, left to move up
	removed        uint64
	buf            []byte // shared by the levels: a batch's names are copied out before a child reads
}

// empty removes everything in the directory fd, depth levels below the top.
func (rm *remover) empty(fd, depth int) error {
	for {
		names, err := rm.batch(fd)
		if err != nil {
			return err
		}
		if len(names) == 0 {
			return nil
		}
		for _, n := range names {
			if err := rm.removeEntry(fd, n, depth); err != nil {
				return err
			}
		}
		// Entries were removed (and, at the top, moved in) while reading: start over until
		// the directory reads empty.
		if _, err := unix.Seek(fd, 0, io.SeekStart); err != nil {
			return fromErrno("rewind directory", err)
		}
	}
}

// batch reads the next names of the directory fd: none once it reads empty.
func (rm *remover) batch(fd int) ([]string, error) {
	for {
		n, err := unix.Getdents(fd, rm.buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, fromErrno("read directory", err)
		}
		if n == 0 {
			return nil, nil
		}
		if _, _, names := unix.ParseDirent(rm.buf[:n], -1, nil); len(names) > 0 {
			return names, nil
		} // only "." and "..": read on
	}
}

func (rm *remover) removeEntry(dirfd int, name string, depth int) error {
	if rm.entries <= 0 {
		return errorf(helperv1.ErrorCode_ERROR_CODE_RESOURCE_EXHAUSTED, "more than %d entries to remove", maxRemoveEntries)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fromErrno("stat", err)
	}
	flags := 0
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		if depth+1 >= maxDepth {
			return rm.moveUp(dirfd, name)
		}
		sub, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		if err != nil {
			return fromErrno("open directory", err)
		}
		err = rm.empty(sub, depth+1)
		unix.Close(sub)
		if err != nil {
			return err
		}
		flags = unix.AT_REMOVEDIR
	}
	if err := unix.Unlinkat(dirfd, name, flags); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fromErrno("unlink", err)
	}
	rm.entries--
	rm.removed++
	return nil
}

// moveUp moves the directory name in dirfd, maxDepth levels below the top, into the top
// under a fresh staging name (the temporary prefix: recognisable if a remove stops).
func (rm *remover) moveUp(dirfd int, name string) error {
	if rm.moves <= 0 {
		return errorf(helperv1.ErrorCode_ERROR_CODE_RESOURCE_EXHAUSTED, "more than %d directories %d levels deep to remove", maxRemoveMoves, maxDepth)
	}
	err := unix.Renameat2(dirfd, name, rm.top, stagingName(), unix.RENAME_NOREPLACE)
	switch {
	case err == nil:
		rm.moves--
		return nil
	case errors.Is(err, unix.ENOENT):
		return nil
	case errors.Is(err, unix.EXDEV):
		return errorf(helperv1.ErrorCode_ERROR_CODE_RESOURCE_EXHAUSTED, "directory tree more than %d levels deep below a mount point", maxDepth)
	}
	return fromErrno("rename", err)
}
