package protocol

import (
	"bytes"
	"path"
	"strings"

	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// Bounds of file requests and of their answers.
const (
	// MaxPathBytes is the API's bound on a path (execution.v1 conventions).
	MaxPathBytes = 4096
	// MaxFileBytesCeiling is the helper's own ceiling on file bytes moved by one operation,
	// whatever the request's limits say: profiles allow at most 24 MiB, and the response
	// must fit a frame.
	MaxFileBytesCeiling = 24 << 20
	// responseOverhead is room for a result's own fields beside its payload (FileInfo,
	// counts, framing) when a response cap is derived from a profile's limits.
	responseOverhead = 1 << 20
	// TreeResultCap bounds a list, glob or grep result: the helper keeps their payload under
	// 16 MiB (1000 entries of 4 KiB names and link targets for list), plus per-entry fields.
	TreeResultCap = 20 << 20
)

// File describes one file operation: the paths it names, the most its answer may weigh and
// the kind of result it must get back. DescribeFile is the one place that tells the kinds
// apart.
type File struct {
	// Kind names the operation ("read", "write", ...), for logs and metrics (a closed set).
	Kind string
	// paths must each be 1..MaxPathBytes without NUL; optional ones may also be empty.
	paths, optional [][]byte
	// read: the answer carries file content, bounded by max_file_bytes.
	read bool
	// readLength and writeLength are the bytes the operation asks to move.
	readLength, writeLength uint64
	// tree: the answer is a listing (list, glob, grep), bounded by TreeResultCap.
	tree bool
	// is reports whether a result is of this kind.
	is func(*executionv1.FileResult) bool
	// changes: the operation may change the workspace (it is not safe to repeat blindly).
	changes bool
}

// ReadOnly reports whether the operation only reads: repeating it changes nothing, so a
// read whose answer was lost may be sent again.
func (f File) ReadOnly() bool { return !f.changes }

// ReadOnly reports whether req is a file operation that only reads (never a command).
func ReadOnly(req *helperv1.Request) bool {
	f, err := DescribeFile(req.GetFile())
	return err == nil && f.ReadOnly()
}

// DescribeFile describes op, or refuses an operation of no known kind.
func DescribeFile(op *executionv1.FileOperation) (File, error) {
	switch o := op.GetOperation().(type) {
	case *executionv1.FileOperation_Read:
		return File{Kind: "read", read: true, paths: [][]byte{o.Read.GetPath()}, readLength: o.Read.GetLength(),
			is: func(r *executionv1.FileResult) bool { return r.GetRead() != nil }}, nil
	case *executionv1.FileOperation_Write:
		return File{Kind: "write", changes: true, paths: [][]byte{o.Write.GetPath()}, writeLength: uint64(len(o.Write.GetContent())),
			is: func(r *executionv1.FileResult) bool { return r.GetWrite() != nil }}, nil
	case *executionv1.FileOperation_Stat:
		return File{Kind: "stat", paths: [][]byte{o.Stat.GetPath()},
			is: func(r *executionv1.FileResult) bool { return r.GetStat() != nil }}, nil
	case *executionv1.FileOperation_List:
		return File{Kind: "list", paths: [][]byte{o.List.GetPath()}, tree: true,
			is: func(r *executionv1.FileResult) bool { return r.GetList() != nil }}, nil
	case *executionv1.FileOperation_Mkdir:
		return File{Kind: "mkdir", changes: true, paths: [][]byte{o.Mkdir.GetPath()},
			is: func(r *executionv1.FileResult) bool { return r.GetMkdir() != nil }}, nil
	case *executionv1.FileOperation_Remove:
		return File{Kind: "remove", changes: true, paths: [][]byte{o.Remove.GetPath()},
			is: func(r *executionv1.FileResult) bool { return r.GetRemove() != nil }}, nil
	case *executionv1.FileOperation_Rename:
		return File{Kind: "rename", changes: true, paths: [][]byte{o.Rename.GetFrom(), o.Rename.GetTo()},
			is: func(r *executionv1.FileResult) bool { return r.GetRename() != nil }}, nil
	case *executionv1.FileOperation_Copy:
		return File{Kind: "copy", changes: true, paths: [][]byte{o.Copy.GetFrom(), o.Copy.GetTo()},
			is: func(r *executionv1.FileResult) bool { return r.GetCopy() != nil }}, nil
	case *executionv1.FileOperation_Glob:
		return File{Kind: "glob", optional: [][]byte{o.Glob.GetBase()}, tree: true,
			is: func(r *executionv1.FileResult) bool { return r.GetGlob() != nil }}, nil
	case *executionv1.FileOperation_Grep:
		return File{Kind: "grep", optional: [][]byte{o.Grep.GetPath()}, tree: true,
			is: func(r *executionv1.FileResult) bool { return r.GetGrep() != nil }}, nil
	}
	return File{}, Errorf(helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "operation: exactly one file operation is required")
}

// Validate refuses paths that no helper would accept — too long, empty or with NUL, or
// into the reserved ReservedDir — before any lookup; where a path resolves is the kernel's
// business, in the helper.
func (f File) Validate() error {
	for _, p := range f.paths {
		if !validPath(p) {
			return Errorf(helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "path: 1..%d bytes without NUL", MaxPathBytes)
		}
	}
	for _, p := range f.optional {
		if len(p) > 0 && !validPath(p) {
			return Errorf(helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "path: 1..%d bytes without NUL", MaxPathBytes)
		}
	}
	for _, p := range append(f.paths, f.optional...) {
		if len(p) > 0 && p[0] != '/' && Reserved(string(p)) {
			return Errorf(helperv1.ErrorCode_ERROR_CODE_PERMISSION_DENIED, "%s is reserved for the records of durable commands", ReservedDir)
		}
	}
	return nil
}

// WithinLimits refuses a read or a write over the profile's max_file_bytes.
func (f File) WithinLimits(lim *helperv1.Limits) error {
	if f.writeLength > lim.GetMaxFileBytes() {
		return Errorf(helperv1.ErrorCode_ERROR_CODE_RESOURCE_EXHAUSTED, "write of %d bytes exceeds the profile's max_file_bytes %d", f.writeLength, lim.GetMaxFileBytes())
	}
	if f.readLength > lim.GetMaxFileBytes() {
		return Errorf(helperv1.ErrorCode_ERROR_CODE_RESOURCE_EXHAUSTED, "read length %d exceeds the profile's max_file_bytes %d", f.readLength, lim.GetMaxFileBytes())
	}
	return nil
}

func validPath(p []byte) bool {
	return len(p) > 0 && len(p) <= MaxPathBytes && bytes.IndexByte(p, 0) < 0
}

// ResponseCap is the most the helper's answer to the operation may weigh under lim.
func (f File) ResponseCap(lim *helperv1.Limits) int {
	switch {
	case f.read:
		return int(min(lim.GetMaxFileBytes(), MaxFileBytesCeiling) + responseOverhead)
	case f.tree:
		return TreeResultCap
	}
	return responseOverhead
}

// Matches reports whether res is a result of the operation's kind.
func (f File) Matches(res *executionv1.FileResult) bool {
	return res != nil && f.is != nil && f.is(res)
}

// CommandResponseCap is the most the helper's answer to a command may weigh under lim:
// both output streams at their cap, plus the result's own fields.
func CommandResponseCap(lim *helperv1.Limits) int {
	return int(min(2*lim.GetMaxCommandBytes()+responseOverhead, TreeResultCap))
}

// ReservedDir is the workspace root's entry that holds durable commands' records and
// output (docs/commands.md): the file API refuses every path into it and its walks of the
// root pass it by.
const ReservedDir = ".execplane"

// Reserved reports whether a relative path, read lexically, names ReservedDir or something
// beneath it.
func Reserved(p string) bool {
	c := path.Clean(p)
	first, _, _ := strings.Cut(c, "/")
	return first == ReservedDir
}
