package fileops

import (
	"bytes"
	"container/heap"
	"errors"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/execplane/execplane/internal/protocol"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// Bounds on directory operations.
const (
	// defaultPageSize and maxPageSize bound a List page (and the response frame).
	defaultPageSize = 100
	maxPageSize     = 1000
	// maxListScan bounds the entries one List reads: ten million names is minutes of
	// getdents, far past any deadline worth honouring.
	maxListScan = 10_000_000
	// readdirBatch is how many names are read per getdents round; memory stays bounded
	// however large the directory.
	readdirBatch = 1024
	// maxDepth bounds the recursion of one tree walk and the descriptors it holds (one per
	// level). It is not a bound on trees: rename moves a whole tree beneath another in one
	// call, so a tree's depth has no bound but its entries. Glob, grep and copy refuse
	// deeper; a recursive remove goes on past it (remove.go).
	maxDepth = 256
)

func (r *Root) stat(req *executionv1.StatFile) (*executionv1.StatFileResult, error) {
	p, err := checkPath(req.GetPath())
	if err != nil {
		return nil, err
	}
	if isRoot(p) {
		var st unix.Stat_t
		if err := unix.Fstat(r.fd, &st); err != nil {
			return nil, fromErrno("fstat", err)
		}
		return &executionv1.StatFileResult{Info: infoFromStat(".", &st, nil)}, nil
	}
	dirfd, name, err := r.openParent(p)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dirfd)
	info, _, err := statAt(dirfd, name, p)
	if err != nil {
		return nil, err
	}
	return &executionv1.StatFileResult{Info: info}, nil
}

// nameHeap is a max-heap of names: List keeps the page's smallest names in it.
type nameHeap []string

func (h nameHeap) Len() int           { return len(h) }
func (h nameHeap) Less(i, j int) bool { return h[i] > h[j] }
func (h nameHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *nameHeap) Push(x any)        { *h = append(*h, x.(string)) }
func (h *nameHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// list returns one page of a directory's entries, sorted bytewise, after page_token. Memory
// is O(page size) whatever the directory's size: names stream through a bounded heap.
func (r *Root) list(req *executionv1.ListDirectory) (*executionv1.ListDirectoryResult, error) {
	p, err := checkPath(req.GetPath())
	if err != nil {
		return nil, err
	}
	size := int(req.GetPageSize())
	switch {
	case size == 0:
		size = defaultPageSize
	case size > maxPageSize:
		return nil, errorf(helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "page_size above %d", maxPageSize)
	}
	if len(req.GetPageToken()) > MaxPathBytes || bytes.IndexByte(req.GetPageToken(), 0) >= 0 {
		return nil, errorf(helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "malformed page_token")
	}
	after := string(req.GetPageToken())
	fd, err := r.resolve(p, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, fromErrno("open directory", err)
	}
	dir := os.NewFile(uintptr(fd), "dir")
	defer dir.Close()
	h := &nameHeap{}
	more, scanned := false, 0
	for {
		names, err := dir.Readdirnames(readdirBatch)
		for _, n := range names {
			if scanned++; scanned > maxListScan {
				return nil, errorf(helperv1.ErrorCode_ERROR_CODE_RESOURCE_EXHAUSTED, "directory has more than %d entries", maxListScan)
			}
			if n <= after || (n == protocol.ReservedDir && mayBeRoot(p)) {
				continue
			}
			if h.Len() < size {
				heap.Push(h, n)
			} else if n < (*h)[0] {
				(*h)[0] = n
				heap.Fix(h, 0)
				more = true
			} else {
				more = true
			}
		}
		if err != nil || len(names) == 0 {
			break
		}
	}
	page := make([]string, h.Len())
	for i := len(page) - 1; i >= 0; i-- {
		page[i] = heap.Pop(h).(string)
	}
	res := &executionv1.ListDirectoryResult{}
	for _, n := range page {
		info, _, err := statAt(fd, n, n)
		if errors.Is(err, protocol.ErrNotFound) {
			continue // removed while we listed
		}
		if err != nil {
			return nil, err
		}
		res.Entries = append(res.Entries, info)
	}
	if more && len(page) > 0 {
		res.NextPageToken = []byte(page[len(page)-1])
	}
	return res, nil
}

func (r *Root) mkdir(req *executionv1.MakeDirectory) (*executionv1.MakeDirectoryResult, error) {
	p, err := checkPath(req.GetPath())
	if err != nil {
		return nil, err
	}
	mode := req.GetMode() & 0o777
	if mode == 0 {
		mode = defaultDirMode
	}
	if req.GetParents() {
		if _, err := r.mkdirAll(p, mode); err != nil {
			return nil, err
		}
	} else {
		dirfd, name, err := r.openParent(p)
		if err != nil {
			return nil, err
		}
		err = unix.Mkdirat(dirfd, name, mode)
		unix.Close(dirfd)
		if err != nil {
			return nil, fromErrno("mkdir", err)
		}
	}
	st, err := r.stat(&executionv1.StatFile{Path: []byte(p)})
	if err != nil {
		return nil, err
	}
	return &executionv1.MakeDirectoryResult{Info: st.GetInfo()}, nil
}

// mkdirAll creates p and its missing parents, each resolved beneath the root, and returns
// the ones it created, outermost first. An existing directory is not an error; an existing
// non-directory is.
func (r *Root) mkdirAll(p string, mode uint32) (made []string, err error) {
	if isRoot(p) {
		return nil, nil
	}
	comps := strings.Split(p, "/")
	// A ".." after a component that does not exist yet would have it created before the
	// escape is detected; refusing ".." here keeps every refusal free of side effects.
	if slices.Contains(comps, "..") {
		return nil, errorf(helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "creating parents needs a path without '..'")
	}
	for i := range comps {
		if comps[i] == "" || comps[i] == "." {
			continue
		}
		prefix := strings.Join(comps[:i+1], "/")
		fd, err := r.resolve(prefix, unix.O_PATH|unix.O_DIRECTORY)
		if err == nil {
			unix.Close(fd)
			continue
		}
		if !errors.Is(err, unix.ENOENT) {
			return made, fromErrno("open directory", err)
		}
		dirfd, name, err := r.openParent(prefix)
		if err != nil {
			return made, err
		}
		err = unix.Mkdirat(dirfd, name, mode)
		unix.Close(dirfd)
		if err == nil {
			made = append(made, prefix)
		} else if !errors.Is(err, unix.EEXIST) {
			return made, fromErrno("mkdir", err)
		}
		// Re-resolve: whatever now has this name must be a directory beneath the root.
		fd, err = r.resolve(prefix, unix.O_PATH|unix.O_DIRECTORY)
		if err != nil {
			return made, fromErrno("open directory", err)
		}
		unix.Close(fd)
	}
	return made, nil
}

// unmake removes, innermost first, directories mkdirAll created, as long as they are still
// empty: a write that did not happen leaves no parents behind.
func (r *Root) unmake(made []string) {
	for i := len(made) - 1; i >= 0; i-- {
		dirfd, name, err := r.openParent(made[i])
		if err != nil {
			return
		}
		err = unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
		unix.Close(dirfd)
		if err != nil {
			return
		}
	}
}

func (r *Root) rename(req *executionv1.RenamePath) (*executionv1.RenamePathResult, error) {
	from, err := checkPath(req.GetFrom())
	if err != nil {
		return nil, err
	}
	to, err := checkPath(req.GetTo())
	if err != nil {
		return nil, err
	}
	if isRoot(from) || isRoot(to) {
		return nil, errorf(helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "cannot rename the workspace root")
	}
	fromfd, fromName, err := r.openParent(from)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fromfd)
	tofd, toName, err := r.openParent(to)
	if err != nil {
		return nil, err
	}
	defer unix.Close(tofd)
	flags := uint(unix.RENAME_NOREPLACE)
	if req.GetOverwrite() {
		flags = 0
	}
	if err := unix.Renameat2(fromfd, fromName, tofd, toName, flags); err != nil {
		return nil, fromErrno("rename", err)
	}
	info, _, err := statAt(tofd, toName, to)
	if err != nil {
		return nil, err
	}
	return &executionv1.RenamePathResult{Info: info}, nil
}
