package fileops

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"time"

	"golang.org/x/sys/unix"

	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// Defaults for new objects.
const (
	defaultFileMode = 0o644
	defaultDirMode  = 0o755
	// tempPrefix marks the helper's temporary files; a crash between create and rename leaves
	// one behind, recognisable by name.
	tempPrefix = ".execplane-"
)

// read reads [offset, offset+length) of a regular file.
func (r *Root) read(req *executionv1.ReadFile, lim Limits) (*executionv1.ReadFileResult, error) {
	p, err := checkPath(req.GetPath())
	if err != nil {
		return nil, err
	}
	length := req.GetLength()
	if length == 0 {
		length = lim.MaxFileBytes
	}
	if length > lim.MaxFileBytes {
		return nil, errorf(helperv1.ErrorCode_ERROR_CODE_RESOURCE_EXHAUSTED, "read length %d exceeds the limit %d", length, lim.MaxFileBytes)
	}
	// O_NONBLOCK: opening a FIFO must not wait for a writer; fstat refuses it next.
	fd, err := r.resolve(p, unix.O_RDONLY|unix.O_NONBLOCK)
	if err != nil {
		return nil, fromErrno("open", err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fromErrno("fstat", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, errorf(helperv1.ErrorCode_ERROR_CODE_WRONG_TYPE, "not a regular file")
	}
	size := uint64(st.Size)
	res := &executionv1.ReadFileResult{Info: infoFromStat(p, &st, nil)}
	if req.GetOffset() >= size {
		return res, nil
	}
	// Allocate what the file holds, never what the request asks for: a sparse 1 TB file with
	// a huge length still costs at most the limit.
	n := min(length, size-req.GetOffset())
	buf := make([]byte, n)
	got := 0
	for got < len(buf) {
		m, err := unix.Pread(fd, buf[got:], int64(req.GetOffset())+int64(got))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, fromErrno("read", err)
		}
		if m == 0 {
			break // the file shrank while we read
		}
		got += m
	}
	res.Content = buf[:got]
	res.More = req.GetOffset()+uint64(got) < size
	return res, nil
}

// write replaces a file's whole content atomically.
func (r *Root) write(req *executionv1.WriteFile, lim Limits) (*executionv1.WriteFileResult, error) {
	p, err := checkPath(req.GetPath())
	if err != nil {
		return nil, err
	}
	if uint64(len(req.GetContent())) > lim.MaxFileBytes {
		return nil, errorf(helperv1.ErrorCode_ERROR_CODE_RESOURCE_EXHAUSTED, "content of %d bytes exceeds the limit %d", len(req.GetContent()), lim.MaxFileBytes)
	}
	switch req.GetMode() {
	case executionv1.WriteMode_WRITE_MODE_CREATE_ONLY, executionv1.WriteMode_WRITE_MODE_OVERWRITE:
	case executionv1.WriteMode_WRITE_MODE_COMPARE_AND_SWAP:
		if req.GetExpectedVersion() == "" {
			return nil, errorf(helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "compare-and-swap needs expected_version")
		}
	default:
		return nil, errorf(helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "unknown write mode")
	}
	if isRoot(p) {
		return nil, errorf(helperv1.ErrorCode_ERROR_CODE_WRONG_TYPE, "cannot write the workspace root")
	}
	// Compare-and-swap needs the file, so its parents exist: creating them first would leave
	// directories behind a NOT_FOUND refusal.
	if req.GetCreateParents() && req.GetMode() != executionv1.WriteMode_WRITE_MODE_COMPARE_AND_SWAP {
		if parent, _, err := split(p); err != nil {
			return nil, err
		} else if err := r.mkdirAll(parent, defaultDirMode); err != nil {
			return nil, err
		}
	}
	info, err := r.replace(p, req.GetContent(), replaceOptions{
		mode:            req.GetMode(),
		expectedVersion: req.GetExpectedVersion(),
		fileMode:        req.GetFileMode() & 0o777,
	})
	if err != nil {
		return nil, err
	}
	return &executionv1.WriteFileResult{Info: info}, nil
}

type replaceOptions struct {
	mode            executionv1.WriteMode
	expectedVersion string
	// fileMode 0 keeps an existing file's permissions, or uses defaultFileMode.
	fileMode uint32
}

// replace writes content to a temporary file beside p, fsyncs it and renames it over p,
// holding an exclusive lock on the directory so that create-only and compare-and-swap
// writes by concurrent helpers are serialised.
func (r *Root) replace(p string, content []byte, o replaceOptions) (*executionv1.FileInfo, error) {
	dirfd, name, err := r.openParent(p)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dirfd)
	if err := lockBounded(dirfd); err != nil {
		return nil, err
	}
	defer unix.Flock(dirfd, unix.LOCK_UN)

	var cur unix.Stat_t
	exists := true
	if err := unix.Fstatat(dirfd, name, &cur, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if !errors.Is(err, unix.ENOENT) {
			return nil, fromErrno("stat", err)
		}
		exists = false
	}
	switch {
	case exists && o.mode == executionv1.WriteMode_WRITE_MODE_CREATE_ONLY:
		return nil, errorf(helperv1.ErrorCode_ERROR_CODE_ALREADY_EXISTS, "the path exists")
	case !exists && o.mode == executionv1.WriteMode_WRITE_MODE_COMPARE_AND_SWAP:
		return nil, errorf(helperv1.ErrorCode_ERROR_CODE_NOT_FOUND, "compare-and-swap on a missing file")
	case exists && cur.Mode&unix.S_IFMT == unix.S_IFDIR:
		return nil, errorf(helperv1.ErrorCode_ERROR_CODE_WRONG_TYPE, "the path is a directory")
	case exists && o.mode == executionv1.WriteMode_WRITE_MODE_COMPARE_AND_SWAP:
		if cur.Mode&unix.S_IFMT != unix.S_IFREG || version(&cur) != o.expectedVersion {
			return nil, errorf(helperv1.ErrorCode_ERROR_CODE_VERSION_MISMATCH, "the file's version differs from expected_version")
		}
	}
	perm := o.fileMode
	if perm == 0 {
		perm = defaultFileMode
		if exists && cur.Mode&unix.S_IFMT == unix.S_IFREG {
			perm = cur.Mode & 0o777
		}
	}
	var suffix [8]byte
	_, _ = rand.Read(suffix[:])
	tmp := tempPrefix + hex.EncodeToString(suffix[:]) + ".tmp"
	fd, err := unix.Openat(dirfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, perm)
	if err != nil {
		return nil, fromErrno("create temporary file", err)
	}
	committed := false
	defer func() {
		unix.Close(fd)
		if !committed {
			_ = unix.Unlinkat(dirfd, tmp, 0)
		}
	}()
	if err := unix.Fchmod(fd, perm); err != nil { // the umask must not narrow it
		return nil, fromErrno("chmod", err)
	}
	if err := writeAll(fd, content); err != nil {
		return nil, fromErrno("write", err)
	}
	if err := unix.Fsync(fd); err != nil {
		return nil, fromErrno("fsync", err)
	}
	flags := uint(0)
	if o.mode == executionv1.WriteMode_WRITE_MODE_CREATE_ONLY {
		flags = unix.RENAME_NOREPLACE
	}
	if err := unix.Renameat2(dirfd, tmp, dirfd, name, flags); err != nil {
		return nil, fromErrno("rename", err)
	}
	committed = true
	_ = unix.Fsync(dirfd) // durability of the rename; the content is already safe
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fromErrno("fstat", err)
	}
	return infoFromStat(p, &st, nil), nil
}

// writeAll writes all of data to fd.
func writeAll(fd int, data []byte) error {
	for off := 0; off < len(data); {
		n, err := unix.Write(fd, data[off:])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		off += n
	}
	return nil
}

// Bounds on waiting for the directory lock: a command holding flock on the directory must
// not hang writes forever.
const (
	lockWait     = 5 * time.Second
	lockInterval = 10 * time.Millisecond
)

// lockBounded takes an exclusive flock on dirfd, giving up after lockWait.
func lockBounded(dirfd int) error {
	deadline := time.Now().Add(lockWait)
	for {
		err := unix.Flock(dirfd, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			return fromErrno("lock directory", err)
		}
		if time.Now().After(deadline) {
			return errorf(helperv1.ErrorCode_ERROR_CODE_UNAVAILABLE, "the directory is locked by another writer")
		}
		time.Sleep(lockInterval)
	}
}
