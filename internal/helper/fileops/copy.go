package fileops

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"os"

	"golang.org/x/sys/unix"

	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// copy copies a file (or, with recursive, a directory tree) within the workspace. Bytes are
// bounded by the file limit in total, entries by maxCopyEntries; symlinks are copied as
// symlinks, never followed; FIFOs, sockets and devices are skipped.
func (r *Root) copy(req *executionv1.CopyPath, lim Limits) (*executionv1.CopyPathResult, error) {
	from, err := checkPath(req.GetFrom())
	if err != nil {
		return nil, err
	}
	to, err := checkPath(req.GetTo())
	if err != nil {
		return nil, err
	}
	if isRoot(to) {
		return nil, errorf(helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "cannot copy onto the workspace root")
	}
	srcParent, srcName := -1, "."
	if isRoot(from) {
		if srcParent, err = unix.Dup(r.fd); err != nil {
			return nil, fromErrno("dup", err)
		}
	} else if srcParent, srcName, err = r.openParent(from); err != nil {
		return nil, err
	}
	defer unix.Close(srcParent)
	var st unix.Stat_t
	if err := unix.Fstatat(srcParent, srcName, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, fromErrno("stat", err)
	}
	res := &executionv1.CopyPathResult{}
	budget := copyBudget{bytes: lim.MaxFileBytes, entries: maxCopyEntries}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		mode := executionv1.WriteMode_WRITE_MODE_CREATE_ONLY
		if req.GetOverwrite() {
			mode = executionv1.WriteMode_WRITE_MODE_OVERWRITE
		}
		content, err := readAt(srcParent, srcName, &st, &budget)
		if err != nil {
			return nil, err
		}
		info, err := r.replace(to, content, replaceOptions{mode: mode, fileMode: st.Mode & 0o777})
		if err != nil {
			return nil, err
		}
		res.Info, res.CopiedBytes, res.CopiedEntries = info, uint64(len(content)), 1
		return res, nil
	case unix.S_IFDIR:
		if !req.GetRecursive() {
			return nil, errorf(helperv1.ErrorCode_ERROR_CODE_WRONG_TYPE, "source is a directory: set recursive")
		}
	default:
		return nil, errorf(helperv1.ErrorCode_ERROR_CODE_WRONG_TYPE, "source is not a regular file or directory")
	}
	// Directory tree: the destination must not exist (no merging). The tree is built under a
	// temporary name beside it and renamed into place only when complete, so a copy refused
	// partway (a bound, a special file's type change, ENOSPC) leaves the workspace as it was.
	dstParent, dstName, err := r.openParent(to)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dstParent)
	var exists unix.Stat_t
	if err := unix.Fstatat(dstParent, dstName, &exists, unix.AT_SYMLINK_NOFOLLOW); err == nil {
		return nil, errorf(helperv1.ErrorCode_ERROR_CODE_ALREADY_EXISTS, "the destination exists (a tree copy never merges)")
	} else if !errors.Is(err, unix.ENOENT) {
		return nil, fromErrno("stat", err)
	}
	staging := stagingName()
	if err := unix.Mkdirat(dstParent, staging, st.Mode&0o777); err != nil {
		return nil, fromErrno("mkdir", err)
	}
	committed := false
	defer func() {
		if !committed {
			discard(dstParent, staging)
		}
	}()
	src, err := unix.Openat(srcParent, srcName, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fromErrno("open directory", err)
	}
	defer unix.Close(src)
	if inside, err := r.within(src, dstParent); err != nil {
		return nil, err
	} else if inside {
		return nil, errorf(helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "cannot copy a directory into itself")
	}
	dst, err := unix.Openat(dstParent, staging, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fromErrno("open directory", err)
	}
	defer unix.Close(dst)
	if err := copyTree(src, dst, &budget, 0); err != nil {
		return nil, err
	}
	if err := unix.Renameat2(dstParent, staging, dstParent, dstName, unix.RENAME_NOREPLACE); err != nil {
		return nil, fromErrno("rename", err)
	}
	committed = true
	info, _, err := statAt(dstParent, dstName, to)
	if err != nil {
		return nil, err
	}
	res.Info = info
	res.CopiedBytes = lim.MaxFileBytes - budget.bytes
	res.CopiedEntries = uint64(maxCopyEntries - budget.entries + 1)
	return res, nil
}

// stagingName is a fresh temporary name for a tree under construction: the helper's
// temporary prefix (the file API's own writes use it too), so an interrupted helper's
// leftover is recognisable and removable through the API.
func stagingName() string {
	var suffix [8]byte
	_, _ = rand.Read(suffix[:])
	return tempPrefix + hex.EncodeToString(suffix[:]) + ".tmp"
}

// discard removes a tree the helper built itself and did not commit. It was built within
// the copy's entry bound, which is within the remove's, so it is removable whole; a failure
// is left for the caller to see (the name carries the temporary prefix).
func discard(parentfd int, name string) {
	if _, err := removeTree(parentfd, name); err == nil {
		_ = unix.Unlinkat(parentfd, name, unix.AT_REMOVEDIR)
	}
}

// within reports whether directory dir is directory src or beneath it: compared by device
// and inode while walking up through ".." until the workspace root. Bounded: a destination
// further below the root than a path can name plus maxDepth (reachable only through
// symlinks into a deeper tree) is refused, before anything is copied.
func (r *Root) within(src, dir int) (bool, error) {
	var want, root, cur unix.Stat_t
	if err := unix.Fstat(src, &want); err != nil {
		return false, fromErrno("stat", err)
	}
	if err := unix.Fstat(r.fd, &root); err != nil {
		return false, fromErrno("stat", err)
	}
	fd, err := unix.Dup(dir)
	if err != nil {
		return false, fromErrno("dup", err)
	}
	defer func() { unix.Close(fd) }()
	for range maxDepth + MaxPathBytes/2 {
		if err := unix.Fstat(fd, &cur); err != nil {
			return false, fromErrno("stat", err)
		}
		switch {
		case cur.Dev == want.Dev && cur.Ino == want.Ino:
			return true, nil
		case cur.Dev == root.Dev && cur.Ino == root.Ino:
			return false, nil
		}
		up, err := unix.Openat(fd, "..", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return false, fromErrno("open directory", err)
		}
		unix.Close(fd)
		fd = up
	}
	return false, errorf(helperv1.ErrorCode_ERROR_CODE_RESOURCE_EXHAUSTED, "directory tree deeper than %d", maxDepth)
}

type copyBudget struct {
	bytes   uint64
	entries int
}

// readAt reads a regular file named in dirfd, charging the budget.
func readAt(dirfd int, name string, st *unix.Stat_t, budget *copyBudget) ([]byte, error) {
	if uint64(st.Size) > budget.bytes {
		return nil, errorf(helperv1.ErrorCode_ERROR_CODE_RESOURCE_EXHAUSTED, "copy exceeds the limit of %d bytes", budget.bytes)
	}
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fromErrno("open", err)
	}
	f := os.NewFile(uintptr(fd), "file")
	defer f.Close()
	var cur unix.Stat_t
	if err := unix.Fstat(fd, &cur); err != nil || cur.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, errorf(helperv1.ErrorCode_ERROR_CODE_WRONG_TYPE, "source changed type")
	}
	if uint64(cur.Size) > budget.bytes {
		return nil, errorf(helperv1.ErrorCode_ERROR_CODE_RESOURCE_EXHAUSTED, "copy exceeds the limit of %d bytes", budget.bytes)
	}
	buf := make([]byte, min(uint64(cur.Size), budget.bytes))
	n, err := f.ReadAt(buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fromErrno("read", err)
	}
	buf = buf[:n]
	budget.bytes -= uint64(len(buf))
	return buf, nil
}

func copyTree(src, dst int, budget *copyBudget, depth int) error {
	entries := maxWalkEntries
	return walk(src, "", depth, &entries, func(dirfd int, name, _ string, st *unix.Stat_t) (bool, error) {
		if budget.entries <= 0 {
			return false, errorf(helperv1.ErrorCode_ERROR_CODE_RESOURCE_EXHAUSTED, "copy exceeds %d entries", maxCopyEntries)
		}
		budget.entries--
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			content, err := readAt(dirfd, name, st, budget)
			if err != nil {
				return false, err
			}
			fd, err := unix.Openat(dst, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, st.Mode&0o777)
			if err != nil {
				return false, fromErrno("create", err)
			}
			werr := writeAll(fd, content)
			unix.Close(fd)
			return false, fromErrno("write", werr)
		case unix.S_IFLNK:
			buf := make([]byte, MaxPathBytes)
			n, err := unix.Readlinkat(dirfd, name, buf)
			if err != nil {
				return false, fromErrno("readlink", err)
			}
			return false, fromErrno("symlink", unix.Symlinkat(string(buf[:n]), dst, name))
		case unix.S_IFDIR:
			// Refused before it is made: the walk of the source holds a descriptor per level
			// and refuses the level below anyway, and what is refused unmade needs no discard.
			if depth+1 >= maxDepth {
				return false, errorf(helperv1.ErrorCode_ERROR_CODE_RESOURCE_EXHAUSTED, "directory tree deeper than %d", maxDepth)
			}
			if err := unix.Mkdirat(dst, name, st.Mode&0o777); err != nil {
				return false, fromErrno("mkdir", err)
			}
			sub, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return false, fromErrno("open directory", err)
			}
			defer unix.Close(sub)
			subDst, err := unix.Openat(dst, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return false, fromErrno("open directory", err)
			}
			defer unix.Close(subDst)
			return false, copyTree(sub, subDst, budget, depth+1)
		}
		return false, nil // FIFOs, sockets, devices: skipped
	})
}
