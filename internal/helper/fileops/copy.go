package fileops

import (
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
	// Directory tree: the destination must not exist (no merging).
	dstParent, dstName, err := r.openParent(to)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dstParent)
	if err := unix.Mkdirat(dstParent, dstName, st.Mode&0o777); err != nil {
		return nil, fromErrno("mkdir", err)
	}
	src, err := unix.Openat(srcParent, srcName, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fromErrno("open directory", err)
	}
	defer unix.Close(src)
	dst, err := unix.Openat(dstParent, dstName, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fromErrno("open directory", err)
	}
	defer unix.Close(dst)
	if err := copyTree(src, dst, &budget, 0); err != nil {
		return nil, err
	}
	info, _, err := statAt(dstParent, dstName, to)
	if err != nil {
		return nil, err
	}
	res.Info = info
	res.CopiedBytes = lim.MaxFileBytes - budget.bytes
	res.CopiedEntries = uint64(maxCopyEntries - budget.entries + 1)
	return res, nil
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
