package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"time"

	"github.com/execplane/execplane/pkg/apierror"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// listPageSize is the page size List asks for (the server allows 1..1000).
const listPageSize = 500

// FileInfo describes one object beneath the workspace root. Paths are bytes on the wire
// (any name the file system holds); a Go string carries them unchanged.
type FileInfo struct {
	// Path is relative to the workspace root (for List: the entry's name).
	Path string
	Type executionv1.FileType
	// Size in bytes (for a symlink, the length of its target).
	Size    int64
	Mode    fs.FileMode
	ModTime time.Time
	// Version is the content version of a regular file (for compare-and-swap writes).
	Version       string
	SymlinkTarget string
}

// IsDir reports whether the object is a directory.
func (f FileInfo) IsDir() bool { return f.Type == executionv1.FileType_FILE_TYPE_DIRECTORY }

func fileInfo(p *executionv1.FileInfo) FileInfo {
	return FileInfo{Path: string(p.GetPath()), Type: p.GetType(), Size: int64(p.GetSize()), Mode: fs.FileMode(p.GetMode()) & fs.ModePerm,
		ModTime: p.GetModifiedAt().AsTime(), Version: p.GetVersion(), SymlinkTarget: string(p.GetSymlinkTarget())}
}

// files runs one file operation under the run's grant.
func (r *Run) files(ctx context.Context, s safety, op *executionv1.FileOperation) (*executionv1.FileResult, error) {
	g, err := r.runGrant()
	if err != nil {
		return nil, err
	}
	req := &executionv1.FilesRequest{RunGrant: g, Environment: r.env.Ref(), Operation: op}
	resp, err := call(ctx, r.env.c, s, func(ctx context.Context, opts ...grpc.CallOption) (*executionv1.FilesResponse, error) {
		return r.env.c.api.Files(ctx, req, opts...)
	})
	return resp.GetResult(), err
}

// Chunk is one read of a file: content, the file's info when read, and whether more follows.
type Chunk struct {
	Content []byte
	Info    FileInfo
	More    bool
}

// ReadRange reads up to length bytes at offset (0 means as much as one call carries: the
// profile's maxFileBytes).
func (r *Run) ReadRange(ctx context.Context, path string, offset, length uint64) (Chunk, error) {
	res, err := r.files(ctx, idempotent, &executionv1.FileOperation{Operation: &executionv1.FileOperation_Read{Read: &executionv1.ReadFile{
		Path: []byte(path), Offset: offset, Length: length}}})
	if err != nil {
		return Chunk{}, err
	}
	rd := res.GetRead()
	return Chunk{Content: rd.GetContent(), Info: fileInfo(rd.GetInfo()), More: rd.GetMore()}, nil
}

// ReadFile reads a whole regular file into memory, one Files call's worth at a time (the
// cheapest call for the small files agents read most; ReadFileTo streams). If the file
// changes between calls it fails with ErrVersionMismatch rather than return a mix of
// versions.
func (r *Run) ReadFile(ctx context.Context, path string) ([]byte, error) {
	var buf bytes.Buffer
	if _, err := r.readTo(ctx, path, &buf, false); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// ReadFileTo writes a whole regular file to w as it arrives (ReadFileStream, one call's
// worth — the profile's maxFileBytes — at a time), and returns the bytes written. If the file
// changes between calls it fails with ErrVersionMismatch; what was written by then is a
// prefix of one version, as it is when a call fails midway. A gateway without streams is
// read one Files call at a time.
func (r *Run) ReadFileTo(ctx context.Context, path string, w io.Writer) (int64, error) {
	return r.readTo(ctx, path, w, true)
}

func (r *Run) readTo(ctx context.Context, path string, w io.Writer, streams bool) (int64, error) {
	var n int64
	var version string
	changed := func() error {
		return &Error{Code: codes.Aborted, Reason: apierror.ReasonName(executionv1.ErrorReason_ERROR_REASON_VERSION_MISMATCH), Message: fmt.Sprintf("%s changed while it was read", path)}
	}
	for {
		var c Chunk
		var m int64
		var err error
		if streams && n == 0 {
			// Streamed, the content is handed on before its version is known: only the first
			// call's. A later call's is checked against it before any of it is written.
			c, m, err = r.readStream(ctx, path, 0, w)
			if e := (*Error)(nil); errors.As(err, &e) && e.Code == codes.Unimplemented && m == 0 {
				streams = false
				continue
			}
		} else {
			c, err = r.ReadRange(ctx, path, uint64(n), 0)
			if err == nil && n > 0 && c.Info.Version != version {
				return n, changed()
			}
			if err == nil {
				var k int
				k, err = w.Write(c.Content)
				m = int64(k)
			}
		}
		n += m
		if err != nil {
			return n, err
		}
		version = c.Info.Version
		if !c.More || m == 0 {
			return n, nil
		}
	}
}

// partial is a stream that failed after some of its content was handed on: not retried.
type partial struct{ err error }

func (p partial) Error() string { return p.err.Error() }

// readStream reads from offset as much as one call carries, writing the content to w as it
// arrives; the Chunk has the result without content, m the bytes written. It is retried as
// a read is only while nothing was written.
func (r *Run) readStream(ctx context.Context, path string, offset uint64, w io.Writer) (Chunk, int64, error) {
	g, err := r.runGrant()
	if err != nil {
		return Chunk{}, 0, err
	}
	req := &executionv1.ReadFileStreamRequest{RunGrant: g, Environment: r.env.Ref(), Read: &executionv1.ReadFile{Path: []byte(path), Offset: offset}}
	var written int64
	res, err := call(ctx, r.env.c, idempotent, func(ctx context.Context, opts ...grpc.CallOption) (*executionv1.ReadFileResult, error) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		st, err := r.env.c.api.ReadFileStream(ctx, req, opts...)
		if err != nil {
			return nil, err
		}
		for {
			m, err := st.Recv()
			if err == nil && m.GetResult() != nil {
				return m.GetResult(), nil
			}
			if err == nil {
				var k int
				k, err = w.Write(m.GetContent())
				written += int64(k)
				if err != nil {
					// Ended here, so that the stream has finished before call reads its
					// header (see WriteFileFrom).
					cancel()
					for {
						if _, e := st.Recv(); e != nil {
							break
						}
					}
					return nil, partial{err}
				}
				continue
			}
			if errors.Is(err, io.EOF) {
				err = &Error{Code: codes.Internal, Message: "the read's stream ended without its result"}
			}
			if written > 0 {
				return nil, partial{asError(err, "")}
			}
			return nil, err
		}
	})
	var p partial
	if errors.As(err, &p) {
		err = p.err
	}
	if err != nil {
		return Chunk{}, written, err
	}
	return Chunk{Info: fileInfo(res.GetInfo()), More: res.GetMore()}, written, nil
}

// WriteOption refines WriteFile.
type WriteOption func(*executionv1.WriteFile)

// CreateOnly fails the write with ErrAlreadyExists when the path exists.
func CreateOnly() WriteOption {
	return func(w *executionv1.WriteFile) { w.Mode = executionv1.WriteMode_WRITE_MODE_CREATE_ONLY }
}

// IfVersion writes only if the file's content version is still version (compare-and-swap);
// otherwise it fails with ErrVersionMismatch and the file is unchanged.
func IfVersion(version string) WriteOption {
	return func(w *executionv1.WriteFile) {
		w.Mode, w.ExpectedVersion = executionv1.WriteMode_WRITE_MODE_COMPARE_AND_SWAP, version
	}
}

// WithMode sets the permission bits of a created file.
func WithMode(m fs.FileMode) WriteOption {
	return func(w *executionv1.WriteFile) { w.FileMode = uint32(m.Perm()) }
}

// CreateParents creates missing parent directories.
func CreateParents() WriteOption { return func(w *executionv1.WriteFile) { w.CreateParents = true } }

// WriteFile replaces the file's content atomically (the old content stays intact on any
// failure) and returns its new info. By default it overwrites; see CreateOnly and IfVersion.
func (r *Run) WriteFile(ctx context.Context, path string, content []byte, opts ...WriteOption) (FileInfo, error) {
	if len(content) > streamThreshold {
		// Streamed, the content starts on to the Pod while the rest is still arriving.
		fi, err := r.WriteFileFrom(ctx, path, bytes.NewReader(content), int64(len(content)), opts...)
		if e := (*Error)(nil); !errors.As(err, &e) || e.Code != codes.Unimplemented {
			return fi, err
		}
	}
	w := &executionv1.WriteFile{Path: []byte(path), Content: content, Mode: executionv1.WriteMode_WRITE_MODE_OVERWRITE}
	for _, o := range opts {
		o(w)
	}
	res, err := r.files(ctx, serverSaysSo, &executionv1.FileOperation{Operation: &executionv1.FileOperation_Write{Write: w}})
	if err != nil {
		return FileInfo{}, err
	}
	return fileInfo(res.GetWrite().GetInfo()), nil
}

// streamThreshold: WriteFile streams content larger than this (WriteFileFrom).
const streamThreshold = 1 << 20

// streamPiece is the content of one WriteFileStream message: the gateway forwards each as
// it comes, so smaller pieces start the transfer to the Pod sooner.
const streamPiece = 256 << 10

// WriteFileFrom writes size bytes read from src as the file's content, streamed to the
// workspace as they are read (WriteFileStream): as atomic as WriteFile — the file changes
// only if all size bytes arrived and the write's options held at the rename — and bounded
// by the profile's maxFileBytes alike, without holding the content in memory. It is retried
// as WriteFile only when src is an io.Seeker (read again from where it stood).
func (r *Run) WriteFileFrom(ctx context.Context, path string, src io.Reader, size int64, opts ...WriteOption) (FileInfo, error) {
	if size < 0 {
		return FileInfo{}, &Error{Code: codes.InvalidArgument, Reason: apierror.ReasonName(executionv1.ErrorReason_ERROR_REASON_INVALID_ARGUMENT), Message: "a negative size"}
	}
	w := &executionv1.WriteFile{Path: []byte(path), Mode: executionv1.WriteMode_WRITE_MODE_OVERWRITE}
	for _, o := range opts {
		o(w)
	}
	g, err := r.runGrant()
	if err != nil {
		return FileInfo{}, err
	}
	s, seeker := once, io.Seeker(nil)
	var start int64
	if sk, ok := src.(io.Seeker); ok {
		if start, err = sk.Seek(0, io.SeekCurrent); err == nil {
			s, seeker = serverSaysSo, sk
		}
	}
	attempt := 0
	res, err := call(ctx, r.env.c, s, func(ctx context.Context, opts ...grpc.CallOption) (*executionv1.WriteFileStreamResponse, error) {
		if attempt++; attempt > 1 {
			if _, err := seeker.Seek(start, io.SeekStart); err != nil {
				return nil, partial{err}
			}
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel() // a source that fails ends the call: nothing is written
		st, err := r.env.c.api.WriteFileStream(ctx, opts...)
		if err != nil {
			return nil, err
		}
		msg := &executionv1.WriteFileStreamRequest{RunGrant: g, Environment: r.env.Ref(), Write: w, Size: uint64(size)}
		for sent := int64(0); sent < size || msg.Write != nil; {
			// A new buffer each time: a message must not change once sent.
			buf := make([]byte, min(int64(streamPiece), size-sent))
			n, err := io.ReadFull(src, buf)
			if err != nil {
				// Ended here and now, not by the deferred cancel: the stream must have
				// finished (and filled the call's header option) before call reads it.
				cancel()
				_, _ = st.CloseAndRecv()
				return nil, partial{fmt.Errorf("reading the content at byte %d: %w", sent, err)}
			}
			msg.Content = buf[:n]
			if err := st.Send(msg); err != nil {
				break // the gateway ended the call: its answer says why
			}
			sent += int64(n)
			msg = &executionv1.WriteFileStreamRequest{}
		}
		return st.CloseAndRecv()
	})
	var p partial
	if errors.As(err, &p) {
		err = p.err
	}
	if err != nil {
		return FileInfo{}, err
	}
	return fileInfo(res.GetResult().GetInfo()), nil
}

// Stat returns the object's info without following a final symlink.
func (r *Run) Stat(ctx context.Context, path string) (FileInfo, error) {
	res, err := r.files(ctx, idempotent, &executionv1.FileOperation{Operation: &executionv1.FileOperation_Stat{Stat: &executionv1.StatFile{Path: []byte(path)}}})
	if err != nil {
		return FileInfo{}, err
	}
	return fileInfo(res.GetStat().GetInfo()), nil
}

// WorkspaceRoot is the path that names the workspace root (execution.v1 conventions).
const WorkspaceRoot = "."

// List iterates over a directory's entries sorted by name, fetching pages as it goes; ""
// lists the workspace root ("."). An error ends the iteration (yielded once).
func (r *Run) List(ctx context.Context, dir string) iter.Seq2[FileInfo, error] {
	if dir == "" {
		dir = WorkspaceRoot
	}
	return func(yield func(FileInfo, error) bool) {
		var token []byte
		for {
			res, err := r.files(ctx, idempotent, &executionv1.FileOperation{Operation: &executionv1.FileOperation_List{List: &executionv1.ListDirectory{
				Path: []byte(dir), PageSize: listPageSize, PageToken: token}}})
			if err != nil {
				yield(FileInfo{}, err)
				return
			}
			for _, e := range res.GetList().GetEntries() {
				if !yield(fileInfo(e), nil) {
					return
				}
			}
			if token = res.GetList().GetNextPageToken(); len(token) == 0 {
				return
			}
		}
	}
}

// Mkdir creates a directory; MkdirAll creates missing parents too and accepts an existing
// directory.
func (r *Run) Mkdir(ctx context.Context, path string) (FileInfo, error) {
	return r.mkdir(ctx, path, false)
}

// MkdirAll is Mkdir with parents.
func (r *Run) MkdirAll(ctx context.Context, path string) (FileInfo, error) {
	return r.mkdir(ctx, path, true)
}

func (r *Run) mkdir(ctx context.Context, path string, parents bool) (FileInfo, error) {
	res, err := r.files(ctx, serverSaysSo, &executionv1.FileOperation{Operation: &executionv1.FileOperation_Mkdir{Mkdir: &executionv1.MakeDirectory{
		Path: []byte(path), Parents: parents}}})
	if err != nil {
		return FileInfo{}, err
	}
	return fileInfo(res.GetMkdir().GetInfo()), nil
}

// Remove removes a file or an empty directory.
func (r *Run) Remove(ctx context.Context, path string) error {
	_, err := r.remove(ctx, path, false, false)
	return err
}

// RemoveAll removes a path and everything beneath it, and accepts an absent path. It
// returns the number of objects removed.
func (r *Run) RemoveAll(ctx context.Context, path string) (uint64, error) {
	return r.remove(ctx, path, true, true)
}

func (r *Run) remove(ctx context.Context, path string, recursive, missingOK bool) (uint64, error) {
	res, err := r.files(ctx, serverSaysSo, &executionv1.FileOperation{Operation: &executionv1.FileOperation_Remove{Remove: &executionv1.RemovePath{
		Path: []byte(path), Recursive: recursive, MissingOk: missingOK}}})
	return res.GetRemove().GetRemoved(), err
}

// MoveOption refines Rename and Copy.
type MoveOption func(*moveOptions)

type moveOptions struct{ overwrite, recursive bool }

// Overwrite replaces an existing destination (a file, or an empty directory).
func Overwrite() MoveOption { return func(o *moveOptions) { o.overwrite = true } }

// Recursive copies a directory tree (Copy only).
func Recursive() MoveOption { return func(o *moveOptions) { o.recursive = true } }

func moveOpts(opts []MoveOption) moveOptions {
	var o moveOptions
	for _, f := range opts {
		f(&o)
	}
	return o
}

// Rename moves a path within the workspace.
func (r *Run) Rename(ctx context.Context, from, to string, opts ...MoveOption) (FileInfo, error) {
	o := moveOpts(opts)
	res, err := r.files(ctx, serverSaysSo, &executionv1.FileOperation{Operation: &executionv1.FileOperation_Rename{Rename: &executionv1.RenamePath{
		From: []byte(from), To: []byte(to), Overwrite: o.overwrite}}})
	if err != nil {
		return FileInfo{}, err
	}
	return fileInfo(res.GetRename().GetInfo()), nil
}

// CopyResult reports a copy.
type CopyResult struct {
	Info           FileInfo
	Bytes, Entries uint64
}

// Copy copies a file (or, with Recursive, a tree) within the workspace.
func (r *Run) Copy(ctx context.Context, from, to string, opts ...MoveOption) (CopyResult, error) {
	o := moveOpts(opts)
	res, err := r.files(ctx, serverSaysSo, &executionv1.FileOperation{Operation: &executionv1.FileOperation_Copy{Copy: &executionv1.CopyPath{
		From: []byte(from), To: []byte(to), Overwrite: o.overwrite, Recursive: o.recursive}}})
	if err != nil {
		return CopyResult{}, err
	}
	c := res.GetCopy()
	return CopyResult{Info: fileInfo(c.GetInfo()), Bytes: c.GetCopiedBytes(), Entries: c.GetCopiedEntries()}, nil
}

// GlobResult lists matching paths (relative to the workspace root, sorted).
type GlobResult struct {
	Paths []string
	// Truncated: more matched than were returned, or the walk hit its bound.
	Truncated bool
}

// Glob matches pattern ('*', '?', '[...]' per component, '**' for any depth) beneath base
// ("" for the root).
func (r *Run) Glob(ctx context.Context, pattern, base string) (GlobResult, error) {
	res, err := r.files(ctx, idempotent, &executionv1.FileOperation{Operation: &executionv1.FileOperation_Glob{Glob: &executionv1.Glob{
		Pattern: []byte(pattern), Base: []byte(base)}}})
	if err != nil {
		return GlobResult{}, err
	}
	g := GlobResult{Truncated: res.GetGlob().GetTruncated()}
	for _, p := range res.GetGlob().GetPaths() {
		g.Paths = append(g.Paths, string(p))
	}
	return g, nil
}

// GrepRequest searches regular files for an RE2 expression, line by line.
type GrepRequest struct {
	Pattern string
	// Path is a file or directory ("" for the root); Include a shell pattern on file names.
	Path, Include string
	IgnoreCase    bool
	// MaxMatches is 1..10000 (1000 when 0).
	MaxMatches uint32
}

// GrepMatch is one matching line.
type GrepMatch struct {
	Path string
	Line uint64
	Text string
}

// GrepResult lists matches.
type GrepResult struct {
	Matches                     []GrepMatch
	Truncated                   bool
	FilesSearched, FilesSkipped uint64
}

// Grep searches the workspace.
func (r *Run) Grep(ctx context.Context, q GrepRequest) (GrepResult, error) {
	res, err := r.files(ctx, idempotent, &executionv1.FileOperation{Operation: &executionv1.FileOperation_Grep{Grep: &executionv1.Grep{
		Pattern: q.Pattern, Path: []byte(q.Path), Include: []byte(q.Include), IgnoreCase: q.IgnoreCase, MaxMatches: q.MaxMatches}}})
	if err != nil {
		return GrepResult{}, err
	}
	g := res.GetGrep()
	out := GrepResult{Truncated: g.GetTruncated(), FilesSearched: g.GetFilesSearched(), FilesSkipped: g.GetFilesSkipped()}
	for _, m := range g.GetMatches() {
		out.Matches = append(out.Matches, GrepMatch{Path: string(m.GetPath()), Line: m.GetLineNumber(), Text: string(m.GetLine())})
	}
	return out, nil
}
