package fileops

import (
	"bytes"
	"errors"
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/execplane/execplane/internal/protocol"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// Bounds on paths.
const (
	// MaxPathBytes is the protocol's bound; it matches PATH_MAX: longer paths cannot be
	// resolved in one call anyway.
	MaxPathBytes = protocol.MaxPathBytes
	// resolveFlags confine every resolution beneath the root descriptor and refuse
	// /proc-style magic links whose targets are not path-based.
	resolveFlags = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS
	// maxResolveRetries bounds EAGAIN retries of one resolution.
	maxResolveRetries = 1000
)

// openat2 is the system call, a variable so that a test can simulate a kernel without it.
var openat2 = unix.Openat2

// Root is an open workspace root. It is not safe for concurrent use; the helper performs one
// operation per process.
type Root struct {
	fd   int
	path string
}

// ErrConfinementUnavailable is returned by OpenRoot on a kernel without openat2(2).
var ErrConfinementUnavailable = errorf(helperv1.ErrorCode_ERROR_CODE_UNAVAILABLE, "openat2 is unavailable: refusing to resolve paths without kernel confinement")

// OpenRoot opens the workspace root. It refuses a root that is a symlink or not a directory,
// and a kernel that cannot confine resolution.
func OpenRoot(path string) (*Root, error) {
	if path == "" || path == "/" || path[0] != '/' {
		return nil, errorf(helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "workspace root must be an absolute path other than /")
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return nil, errorf(helperv1.ErrorCode_ERROR_CODE_UNAVAILABLE, "workspace root is not a directory (or is a symlink)")
		}
		return nil, errorf(helperv1.ErrorCode_ERROR_CODE_UNAVAILABLE, "open workspace root: %s", err)
	}
	r := &Root{fd: fd, path: path}
	probe, err := r.resolve(".", unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		r.Close()
		if errors.Is(err, unix.ENOSYS) {
			return nil, ErrConfinementUnavailable
		}
		return nil, fromErrno("probe openat2", err)
	}
	unix.Close(probe)
	return r, nil
}

// Close releases the root.
func (r *Root) Close() error {
	if r.fd < 0 {
		return nil
	}
	err := unix.Close(r.fd)
	r.fd = -1
	return err
}

// resolve opens rel beneath the root.
func (r *Root) resolve(rel string, flags int) (int, error) {
	flags |= unix.O_CLOEXEC
	if flags&unix.O_PATH == 0 {
		// openat2 is strict: O_PATH admits only O_DIRECTORY, O_NOFOLLOW and O_CLOEXEC.
		flags |= unix.O_NOCTTY
	}
	for attempt := 0; ; attempt++ {
		fd, err := openat2(r.fd, rel, &unix.OpenHow{Flags: uint64(flags), Resolve: resolveFlags})
		// openat2 answers EAGAIN when a concurrent rename raced RESOLVE_BENEATH's checks;
		// retrying is what the kernel documents. A file under a lease also answers EAGAIN
		// to an O_NONBLOCK open, for as long as the lease holder likes: bounded.
		if (errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR)) && attempt < maxResolveRetries {
			continue
		}
		if errors.Is(err, unix.EAGAIN) {
			return -1, errorf(helperv1.ErrorCode_ERROR_CODE_UNAVAILABLE, "the path is busy (renamed concurrently or leased)")
		}
		return fd, err
	}
}

// checkPath validates a request path: 1..MaxPathBytes bytes, no NUL, relative. Absolute
// paths are an escape attempt. It returns the path with trailing slashes removed ("a/b/"
// names "a/b").
func checkPath(p []byte) (string, error) {
	switch {
	case len(p) == 0:
		return "", errorf(helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "empty path")
	case len(p) > MaxPathBytes:
		return "", errorf(helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "path longer than %d bytes", MaxPathBytes)
	case bytes.IndexByte(p, 0) >= 0:
		return "", errorf(helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "NUL byte in path")
	case p[0] == '/':
		return "", errorf(helperv1.ErrorCode_ERROR_CODE_PATH_ESCAPE, "absolute path")
	}
	s := strings.TrimRight(string(p), "/")
	if s == "" {
		return "", errorf(helperv1.ErrorCode_ERROR_CODE_PATH_ESCAPE, "absolute path")
	}
	if protocol.Reserved(s) {
		return "", errReserved
	}
	return s, nil
}

// errReserved refuses a path into the durable commands' records (docs/commands.md).
var errReserved = errorf(helperv1.ErrorCode_ERROR_CODE_PERMISSION_DENIED, "%s is reserved for the records of durable commands", protocol.ReservedDir)

// passReserved wraps a walk of the root so that it passes the reserved entry by.
func passReserved(atRoot bool, fn walkFunc) walkFunc {
	if !atRoot {
		return fn
	}
	return func(dirfd int, name, rel string, st *unix.Stat_t) (bool, error) {
		if rel == protocol.ReservedDir {
			return false, nil
		}
		return fn(dirfd, name, rel, st)
	}
}

// split returns the parent directory (relative, "." for the root) and the final name of a
// checked path. The final name may not be "." or "..": operations on a name need a real
// name.
func split(p string) (parent, name string, err error) {
	i := strings.LastIndexByte(p, '/')
	parent, name = ".", p
	if i >= 0 {
		parent, name = strings.TrimRight(p[:i], "/"), p[i+1:]
		if parent == "" {
			parent = "."
		}
	}
	if name == "." || name == ".." {
		return "", "", errorf(helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "the path must end in a name, not %q", name)
	}
	return parent, name, nil
}

// isRoot reports whether a checked path names the root itself.
func isRoot(p string) bool {
	for _, c := range strings.Split(p, "/") {
		if c != "." && c != "" {
			return false
		}
	}
	return true
}

// mayBeRoot reports whether a checked path may name the root, read lexically ("a/.."
// may): a walk or a listing from it passes the reserved entry by, as at the root. (Through
// a symlink "a/.." may be another directory, which then hides an entry of that name: the
// safe side.)
func mayBeRoot(p string) bool {
	return path.Clean(p) == "."
}

// openParent opens the directory that holds p's final name, for *at calls on that name.
func (r *Root) openParent(p string) (fd int, name string, err error) {
	parent, name, err := split(p)
	if err != nil {
		return -1, "", err
	}
	fd, err = r.resolve(parent, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return -1, "", fromErrno("open parent directory", err)
	}
	return fd, name, nil
}

// OpenDir resolves a working directory beneath the root (empty means the root) and returns
// a descriptor of it, for the helper to fchdir to before starting a command: the directory
// the command starts in is exactly the one the kernel resolved, never a path string
// resolved again (a lexical ".." or a swapped component could point elsewhere).
func (r *Root) OpenDir(rel []byte) (int, error) {
	p := "."
	if len(rel) > 0 {
		var err error
		if p, err = checkPath(rel); err != nil {
			return -1, err
		}
	}
	fd, err := r.resolve(p, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return -1, fromErrno("working directory", err)
	}
	return fd, nil
}
