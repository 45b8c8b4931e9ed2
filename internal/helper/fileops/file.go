package fileops

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"time"

	"golang.org/x/sys/unix"

	"github.com/execplane/execplane/internal/failpoint"
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
	u, err := r.BeginWrite(req, uint64(len(req.GetContent())), lim)
	if err != nil {
		return nil, err
	}
	if err := u.Write(req.GetContent()); err != nil {
		u.Abort()
		return nil, err
	}
	return u.Commit()
}

// Upload is a write whose content comes in pieces (a session's body): written to a
// temporary file beside the target as it comes, then fsynced and renamed over the target by
// Commit, under the directory lock and with the write's precondition checked again there.
// Until Commit nothing is visible; Abort (or a failed Commit) leaves no trace.
type Upload struct {
	// replaced holds the file a committed upload replaced (or -1), when later: see
	// ReleaseLater.
	replaced      int
	later         bool
	root          *Root
	made          []string // parents BeginWrite created, removed again by an abort
	p             string
	dirfd, fd     int
	name, tmp     string
	o             replaceOptions
	size, written uint64
	done          bool
}

// BeginWrite checks a write of size bytes of content (req's own content is ignored) and
// creates its temporary file. The precondition is checked here too, so that a write bound
// to fail is refused before its content travels; Commit decides.
func (r *Root) BeginWrite(req *executionv1.WriteFile, size uint64, lim Limits) (*Upload, error) {
	p, err := checkPath(req.GetPath())
	if err != nil {
		return nil, err
	}
	if size > lim.MaxFileBytes {
		return nil, errorf(helperv1.ErrorCode_ERROR_CODE_RESOURCE_EXHAUSTED, "content of %d bytes exceeds the limit %d", size, lim.MaxFileBytes)
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
	var made []string
	if req.GetCreateParents() && req.GetMode() != executionv1.WriteMode_WRITE_MODE_COMPARE_AND_SWAP {
		parent, _, err := split(p)
		if err != nil {
			return nil, err
		}
		if made, err = r.mkdirAll(parent, defaultDirMode); err != nil {
			r.unmake(made)
			return nil, err
		}
	}
	u, err := r.begin(p, size, replaceOptions{
		mode:            req.GetMode(),
		expectedVersion: req.GetExpectedVersion(),
		fileMode:        req.GetFileMode() & 0o777,
	})
	if err != nil {
		r.unmake(made)
		return nil, err
	}
	u.root, u.made = r, made
	return u, nil
}

type replaceOptions struct {
	mode            executionv1.WriteMode
	expectedVersion string
	// fileMode 0 keeps an existing file's permissions, or uses defaultFileMode.
	fileMode uint32
}

// replace writes content to a temporary file beside p, fsyncs it and renames it over p.
func (r *Root) replace(p string, content []byte, o replaceOptions) (*executionv1.FileInfo, error) {
	u, err := r.begin(p, uint64(len(content)), o)
	if err != nil {
		return nil, err
	}
	if err := u.Write(content); err != nil {
		u.Abort()
		return nil, err
	}
	res, err := u.Commit()
	if err != nil {
		return nil, err
	}
	return res.GetInfo(), nil
}

// breakCAS, in a failpoint build asked to break it (failpoint.Breaks), writes every
// compare-and-swap — on a version, or on the file's absence (create-only) — as an
// overwrite: a writer replaces content it never saw. It is the fault suite's proof that its
// file model catches a lost update (test/chaos).
const breakCAS = "helper-ignores-cas"

// begin opens p's directory, checks the precondition as things stand and creates the
// temporary file (owner-only until Commit sets its permissions).
func (r *Root) begin(p string, size uint64, o replaceOptions) (*Upload, error) {
	if failpoint.Breaks(breakCAS) {
		o.mode = executionv1.WriteMode_WRITE_MODE_OVERWRITE
	}
	dirfd, name, err := r.openParent(p)
	if err != nil {
		return nil, err
	}
	if _, _, err := check(dirfd, name, o); err != nil {
		unix.Close(dirfd)
		return nil, err
	}
	var suffix [8]byte
	_, _ = rand.Read(suffix[:])
	tmp := tempPrefix + hex.EncodeToString(suffix[:]) + ".tmp"
	fd, err := unix.Openat(dirfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		unix.Close(dirfd)
		return nil, fromErrno("create temporary file", err)
	}
	return &Upload{p: p, dirfd: dirfd, fd: fd, name: name, tmp: tmp, o: o, size: size, replaced: -1}, nil
}

// check applies the write's precondition to what name is now, returning the permissions
// the new content gets and the size of the regular file it replaces (0 when none).
func check(dirfd int, name string, o replaceOptions) (perm uint32, replaced int64, err error) {
	var cur unix.Stat_t
	exists := true
	if err := unix.Fstatat(dirfd, name, &cur, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if !errors.Is(err, unix.ENOENT) {
			return 0, 0, fromErrno("stat", err)
		}
		exists = false
	}
	switch {
	case exists && o.mode == executionv1.WriteMode_WRITE_MODE_CREATE_ONLY:
		return 0, 0, errorf(helperv1.ErrorCode_ERROR_CODE_ALREADY_EXISTS, "the path exists")
	case !exists && o.mode == executionv1.WriteMode_WRITE_MODE_COMPARE_AND_SWAP:
		return 0, 0, errorf(helperv1.ErrorCode_ERROR_CODE_NOT_FOUND, "compare-and-swap on a missing file")
	case exists && cur.Mode&unix.S_IFMT == unix.S_IFDIR:
		return 0, 0, errorf(helperv1.ErrorCode_ERROR_CODE_WRONG_TYPE, "the path is a directory")
	case exists && o.mode == executionv1.WriteMode_WRITE_MODE_COMPARE_AND_SWAP:
		if cur.Mode&unix.S_IFMT != unix.S_IFREG || version(&cur) != o.expectedVersion {
			return 0, 0, errorf(helperv1.ErrorCode_ERROR_CODE_VERSION_MISMATCH, "the file's version differs from expected_version")
		}
	}
	regular := exists && cur.Mode&unix.S_IFMT == unix.S_IFREG
	perm = o.fileMode
	if perm == 0 {
		perm = defaultFileMode
		if regular {
			perm = cur.Mode & 0o777
		}
	}
	if regular {
		replaced = cur.Size
	}
	return perm, replaced, nil
}

// Write appends a piece of the content; more than the size announced is refused. The
// kernel is asked to start writing the piece back at once, so that Commit's fsync has
// little left to wait for.
func (u *Upload) Write(piece []byte) error {
	if uint64(len(piece)) > u.size-u.written {
		return errorf(helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "more content than the %d bytes announced", u.size)
	}
	if err := writeAll(u.fd, piece); err != nil {
		return fromErrno("write", err)
	}
	if len(piece) > 0 {
		_ = unix.SyncFileRange(u.fd, int64(u.written), int64(len(piece)), unix.SYNC_FILE_RANGE_WRITE)
	}
	u.written += uint64(len(piece))
	return nil
}

// Commit checks that the whole content came, then — holding an exclusive lock on the
// directory, so that create-only and compare-and-swap writes by concurrent helpers are
// serialised — checks the precondition again, sets the permissions, fsyncs the file and
// renames it over the target. On any failure nothing changed.
func (u *Upload) Commit() (*executionv1.WriteFileResult, error) {
	defer u.Abort()
	if u.written != u.size {
		return nil, errorf(helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "%d of the %d bytes announced", u.written, u.size)
	}
	if err := lockBounded(u.dirfd); err != nil {
		return nil, err
	}
	defer unix.Flock(u.dirfd, unix.LOCK_UN)
	perm, replaced, err := check(u.dirfd, u.name, u.o)
	if err != nil {
		return nil, err
	}
	if replaced >= releaseLater && u.later {
		// Holding the replaced file open moves the freeing of its blocks — milliseconds
		// for megabytes — out of the rename, past the answer (Upload.Release).
		if fd, err := unix.Openat(u.dirfd, u.name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err == nil {
			u.replaced = fd
		}
	}
	if err := unix.Fchmod(u.fd, perm); err != nil { // the umask must not narrow it
		return nil, fromErrno("chmod", err)
	}
	if err := unix.Fsync(u.fd); err != nil {
		return nil, fromErrno("fsync", err)
	}
	flags := uint(0)
	if u.o.mode == executionv1.WriteMode_WRITE_MODE_CREATE_ONLY {
		flags = unix.RENAME_NOREPLACE
	}
	if err := unix.Renameat2(u.dirfd, u.tmp, u.dirfd, u.name, flags); err != nil {
		return nil, fromErrno("rename", err)
	}
	u.tmp = ""              // committed: nothing to remove
	_ = unix.Fsync(u.dirfd) // durability of the rename; the content is already safe
	var st unix.Stat_t
	if err := unix.Fstat(u.fd, &st); err != nil {
		return nil, fromErrno("fstat", err)
	}
	return &executionv1.WriteFileResult{Info: infoFromStat(u.p, &st, nil)}, nil
}

// releaseLater is the size of a replaced file from which its freeing is put off past the
// answer (about a millisecond per 2 MiB on ext4 here).
const releaseLater = 1 << 20

// ReleaseLater, called before Commit, keeps a large file the upload replaces open past
// Commit, until Release: its blocks are then freed off the answer's path.
func (u *Upload) ReleaseLater() { u.later = true }

// Release lets go of the file a committed upload replaced (ReleaseLater), freeing its
// blocks. It may be called more than once.
func (u *Upload) Release() {
	if u.replaced >= 0 {
		unix.Close(u.replaced)
		u.replaced = -1
	}
}

// Abort removes the temporary file unless the upload committed, and releases it; it may be
// called more than once.
func (u *Upload) Abort() {
	if u.done {
		return
	}
	u.done = true
	if u.replaced >= 0 && u.tmp != "" {
		unix.Close(u.replaced) // not committed: the file was not replaced
		u.replaced = -1
	}
	committed := u.tmp == ""
	if !committed {
		_ = unix.Unlinkat(u.dirfd, u.tmp, 0)
	}
	unix.Close(u.fd)
	unix.Close(u.dirfd)
	if !committed && u.root != nil {
		u.root.unmake(u.made)
	}
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
