package fileops

import (
	"encoding/hex"
	"errors"
	"io"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/execplane/execplane/internal/protocol"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// DefaultMirrorEntries bounds the entries one mirror visits in the source when the caller
// sets no bound: a workspace of more is refused, not copied in part.
const DefaultMirrorEntries = 2_000_000

// MirrorResult counts what a mirror did.
type MirrorResult struct {
	// Entries is how many entries of the source it visited.
	Entries uint64 `json:"entries"`
	// Copied and Bytes are the files it wrote and their bytes; Unchanged the files (and
	// symlinks) it found already equal in the target.
	Copied    uint64 `json:"copied"`
	Bytes     uint64 `json:"bytes"`
	Unchanged uint64 `json:"unchanged"`
	// Removed is how many entries of the target it removed (there and not in the source).
	Removed uint64 `json:"removed"`
	// Special is how many FIFOs, sockets and devices it passed by (not copied).
	Special uint64 `json:"special"`
}

// Mirror makes the tree beneath dst equal to the tree beneath src: a snapshot's and a
// restore's copy of a workspace (docs/snapshots.md). Both roots are confined as every file
// operation is: the walk opens one name at a time relative to a descriptor, never follows a
// symlink (a symlink is copied as one, its text as it is), and never leaves either tree.
//
// Equal means: the same directories, regular files (content, permission bits, modification
// time) and symlinks. Not carried: the durable commands' records (protocol.ReservedDir at
// the root — a copy has no commands), the helper's own uncommitted temporary files, FIFOs,
// sockets and devices (counted in Special), ownership (everything is the copier's, the
// executor's user) and hard links (each name gets its own copy).
//
// It is resumable: a file already equal in the target (same size, modification time and
// permissions) is not written again, so a copy cut short and started again goes on from
// where it was; what the target holds and the source does not is removed. A file is
// written under a temporary name and renamed into place, so an interrupted run leaves
// whole files only (and temporaries the next run removes). maxEntries bounds the entries
// visited (≤ 0: DefaultMirrorEntries); a deeper tree than the file API's depth bound is
// refused.
func Mirror(src, dst *Root, maxEntries int) (MirrorResult, error) {
	if maxEntries <= 0 {
		maxEntries = DefaultMirrorEntries
	}
	m := mirror{budget: maxEntries}
	var st unix.Stat_t
	if err := unix.Fstat(src.fd, &st); err != nil {
		return m.res, fromErrno("stat", err)
	}
	if err := writable(dst.fd); err != nil {
		return m.res, err
	}
	if err := m.dir(src.fd, dst.fd, 0); err != nil {
		return m.res, err
	}
	if err := finishDir(dst.fd, &st); err != nil {
		return m.res, err
	}
	return m.res, fromErrno("sync", unix.Syncfs(dst.fd))
}

type mirror struct {
	budget int
	res    MirrorResult
}

// dir mirrors the directory src into the directory dst, depth levels below the roots.
func (m *mirror) dir(src, dst, depth int) error {
	if depth >= maxDepth {
		return errorf(helperv1.ErrorCode_ERROR_CODE_RESOURCE_EXHAUSTED, "directory tree deeper than %d", maxDepth)
	}
	names, err := m.names(src, true)
	if err != nil {
		return err
	}
	keep := map[string]bool{}
	for _, name := range names {
		if (depth == 0 && name == protocol.ReservedDir) || isTempName(name) {
			continue
		}
		var st unix.Stat_t
		if err := unix.Fstatat(src, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue // removed meanwhile
			}
			return fromErrno("stat", err)
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			err = m.file(src, dst, name, &st)
		case unix.S_IFLNK:
			err = m.symlink(src, dst, name)
		case unix.S_IFDIR:
			err = m.subdir(src, dst, name, &st, depth)
		default:
			m.res.Special++
			continue
		}
		if err != nil {
			return err
		}
		keep[name] = true
	}
	// What the target holds and the source does not.
	have, err := m.names(dst, false)
	if err != nil {
		return err
	}
	for _, name := range have {
		if !keep[name] {
			if err := removeName(dst, name); err != nil {
				return err
			}
			m.res.Removed++
		}
	}
	return nil
}

// names lists a directory, charging the source's entries to the budget.
func (m *mirror) names(fd int, charge bool) ([]string, error) {
	dup, err := unix.Dup(fd)
	if err != nil {
		return nil, fromErrno("dup", err)
	}
	dir := os.NewFile(uintptr(dup), "dir")
	defer dir.Close()
	var names []string
	for {
		batch, err := dir.Readdirnames(readdirBatch)
		names = append(names, batch...)
		if charge && len(names) > m.budget {
			return nil, errorf(helperv1.ErrorCode_ERROR_CODE_RESOURCE_EXHAUSTED, "the workspace has more than %d entries", m.res.Entries+uint64(m.budget))
		}
		if errors.Is(err, io.EOF) || len(batch) == 0 {
			break
		}
		if err != nil {
			return nil, fromErrno("read directory", err)
		}
	}
	if charge {
		m.budget -= len(names)
		m.res.Entries += uint64(len(names))
	}
	slices.Sort(names)
	return names, nil
}

// file copies the regular file name unless the target's is already equal.
func (m *mirror) file(src, dst int, name string, st *unix.Stat_t) error {
	var cur unix.Stat_t
	if err := unix.Fstatat(dst, name, &cur, unix.AT_SYMLINK_NOFOLLOW); err == nil &&
		cur.Mode&unix.S_IFMT == unix.S_IFREG && cur.Size == st.Size && cur.Mtim == st.Mtim && cur.Mode&0o7777 == st.Mode&0o7777 {
		m.res.Unchanged++
		return nil
	}
	in, err := unix.Openat(src, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fromErrno("open", err)
	}
	f := os.NewFile(uintptr(in), name)
	defer f.Close()
	var opened unix.Stat_t
	if err := unix.Fstat(in, &opened); err != nil || opened.Mode&unix.S_IFMT != unix.S_IFREG {
		return errorf(helperv1.ErrorCode_ERROR_CODE_WRONG_TYPE, "a source file changed type while it was copied")
	}
	tmp := stagingName()
	out, err := unix.Openat(dst, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fromErrno("create", err)
	}
	w := os.NewFile(uintptr(out), tmp)
	n, err := io.Copy(w, f)
	if err == nil {
		err = unix.Fchmod(out, opened.Mode&0o7777)
	}
	if err == nil {
		err = unix.UtimesNanoAt(dst, tmp, []unix.Timespec{opened.Atim, opened.Mtim}, unix.AT_SYMLINK_NOFOLLOW)
	}
	if err == nil {
		// Durable before it is renamed into place: a crash after the rename leaves a file
		// whose size and time say it is whole, which a resumed mirror does not copy again.
		err = unix.Fsync(out)
	}
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = m.replace(dst, tmp, name)
	}
	if err != nil {
		_ = unix.Unlinkat(dst, tmp, 0)
		return fromErrno("write", err)
	}
	m.res.Copied++
	m.res.Bytes += uint64(n)
	return nil
}

// symlink copies the symlink name (its text, never what it points at) unless the target's
// is already the same.
func (m *mirror) symlink(src, dst int, name string) error {
	buf := make([]byte, MaxPathBytes)
	n, err := unix.Readlinkat(src, name, buf)
	if err != nil {
		return fromErrno("readlink", err)
	}
	text := string(buf[:n])
	if cur, err := unix.Readlinkat(dst, name, buf); err == nil && string(buf[:cur]) == text {
		m.res.Unchanged++
		return nil
	}
	tmp := stagingName()
	if err := unix.Symlinkat(text, dst, tmp); err != nil {
		return fromErrno("symlink", err)
	}
	if err := m.replace(dst, tmp, name); err != nil {
		_ = unix.Unlinkat(dst, tmp, 0)
		return fromErrno("rename", err)
	}
	return nil
}

// subdir mirrors the directory name, making it in the target when it is not a directory
// there.
func (m *mirror) subdir(src, dst int, name string, st *unix.Stat_t, depth int) error {
	var cur unix.Stat_t
	err := unix.Fstatat(dst, name, &cur, unix.AT_SYMLINK_NOFOLLOW)
	if err == nil && cur.Mode&unix.S_IFMT != unix.S_IFDIR {
		if err := removeName(dst, name); err != nil {
			return err
		}
		m.res.Removed++
		err = unix.ENOENT
	}
	if errors.Is(err, unix.ENOENT) {
		if err := unix.Mkdirat(dst, name, 0o700); err != nil {
			return fromErrno("mkdir", err)
		}
	} else if err != nil {
		return fromErrno("stat", err)
	}
	from, err := unix.Openat(src, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fromErrno("open directory", err)
	}
	defer unix.Close(from)
	to, err := unix.Openat(dst, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fromErrno("open directory", err)
	}
	defer unix.Close(to)
	if err := writable(to); err != nil {
		return err
	}
	if err := m.dir(from, to, depth+1); err != nil {
		return err
	}
	return finishDir(to, st)
}

// replace renames tmp over name in dir; a directory in the way is removed first.
func (m *mirror) replace(dir int, tmp, name string) error {
	var cur unix.Stat_t
	if err := unix.Fstatat(dir, name, &cur, unix.AT_SYMLINK_NOFOLLOW); err == nil && cur.Mode&unix.S_IFMT == unix.S_IFDIR {
		if err := removeName(dir, name); err != nil {
			return err
		}
		m.res.Removed++
	}
	return unix.Renameat(dir, tmp, dir, name)
}

// finishDir gives the directory fd the permissions and modification time of st: after its
// entries, whose changes move it.
func finishDir(fd int, st *unix.Stat_t) error {
	if err := unix.Fchmod(fd, st.Mode&0o7777); err != nil {
		return fromErrno("chmod", err)
	}
	return fromErrno("utimes", unix.UtimesNanoAt(fd, ".", []unix.Timespec{st.Atim, st.Mtim}, 0))
}

// writable lets the copier write into the target directory fd (a run before may have
// given it the source's permissions, without write); finishDir sets them again.
func writable(fd int) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fromErrno("stat", err)
	}
	if st.Mode&0o700 == 0o700 {
		return nil
	}
	return fromErrno("chmod", unix.Fchmod(fd, st.Mode&0o7777|0o700))
}

// removeName removes the entry name of dir, a whole tree for a directory.
func removeName(dir int, name string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fromErrno("stat", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fromErrno("remove", unix.Unlinkat(dir, name, 0))
	}
	if _, err := removeTree(dir, name); err != nil {
		return err
	}
	return fromErrno("remove", unix.Unlinkat(dir, name, unix.AT_REMOVEDIR))
}

// isTempName reports whether name is one of the helper's temporary names (stagingName):
// an uncommitted write, not part of the workspace.
func isTempName(name string) bool {
	hexPart, ok := strings.CutPrefix(name, tempPrefix)
	if !ok {
		return false
	}
	hexPart, ok = strings.CutSuffix(hexPart, ".tmp")
	if !ok || len(hexPart) != 16 {
		return false
	}
	_, err := hex.DecodeString(hexPart)
	return err == nil
}
