package e2b

import (
	"context"
	"errors"
	"io/fs"
	"path"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/execplane/execplane/pkg/client"
	filesystem "github.com/execplane/execplane/proto/envd/filesystem"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// Bounds of ListDir.
const (
	// maxListDepth bounds a recursive listing's depth, and maxListEntries its size: each
	// directory below the first level is one more call, and the answer is one message.
	maxListDepth   = 16
	maxListEntries = 10000
	// fileOwner is the name envd reports as every entry's owner and group: the executor's
	// one user, as E2B names it.
	fileOwner = "user"
)

// filesystemService is envd's filesystem.Filesystem over the workspace's file API.
type filesystemService struct{ f *frontEnd }

func (s filesystemService) Stat(ctx context.Context, req *connect.Request[filesystem.StatRequest]) (*connect.Response[filesystem.StatResponse], error) {
	out := &filesystem.StatResponse{}
	err := s.f.at(ctx, req.Msg.GetPath(), func(run *client.Run, rel string) error {
		info, err := run.Stat(ctx, rel)
		out.Entry = entryOf(rel, info)
		return err
	})
	if err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(out), nil
}

// MakeDir creates the directory and its parents; an existing directory is already_exists
// (the SDK's false), an existing file invalid_argument, as envd answers.
func (s filesystemService) MakeDir(ctx context.Context, req *connect.Request[filesystem.MakeDirRequest]) (*connect.Response[filesystem.MakeDirResponse], error) {
	out := &filesystem.MakeDirResponse{}
	err := s.f.at(ctx, req.Msg.GetPath(), func(run *client.Run, rel string) error {
		if info, err := run.Stat(ctx, rel); err == nil {
			if info.IsDir() {
				return connect.NewError(connect.CodeAlreadyExists, errors.New("directory '"+e2bPath(rel)+"' already exists"))
			}
			return connect.NewError(connect.CodeInvalidArgument, errors.New("path '"+e2bPath(rel)+"' already exists and is not a directory"))
		} else if !errors.Is(err, client.ErrNotFound) {
			return err
		}
		info, err := run.MkdirAll(ctx, rel)
		out.Entry = entryOf(rel, info)
		return err
	})
	if err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(out), nil
}

// Move renames, replacing a file at the destination as rename(2) does.
func (s filesystemService) Move(ctx context.Context, req *connect.Request[filesystem.MoveRequest]) (*connect.Response[filesystem.MoveResponse], error) {
	to, err := workspacePath(req.Msg.GetDestination())
	if err != nil {
		return nil, connectError(err)
	}
	out := &filesystem.MoveResponse{}
	err = s.f.at(ctx, req.Msg.GetSource(), func(run *client.Run, from string) error {
		info, err := run.Rename(ctx, from, to, client.Overwrite())
		out.Entry = entryOf(to, info)
		return err
	})
	if err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(out), nil
}

// ListDir lists a directory to a depth (1: its entries), without the directory itself.
func (s filesystemService) ListDir(ctx context.Context, req *connect.Request[filesystem.ListDirRequest]) (*connect.Response[filesystem.ListDirResponse], error) {
	depth := int(req.Msg.GetDepth())
	if depth == 0 {
		depth = 1
	}
	if depth > maxListDepth {
		return nil, connectError(badRequest("depth must be at most %d", maxListDepth))
	}
	out := &filesystem.ListDirResponse{}
	err := s.f.at(ctx, req.Msg.GetPath(), func(run *client.Run, rel string) error {
		out.Entries = out.Entries[:0]
		if info, err := run.Stat(ctx, rel); err != nil {
			return err
		} else if !info.IsDir() {
			return badRequest("path '%s' is not a directory", e2bPath(rel))
		}
		var walk func(dir string, level int) error
		walk = func(dir string, level int) error {
			for info, err := range run.List(ctx, dir) {
				if err != nil {
					return err
				}
				if len(out.Entries) == maxListEntries {
					return badRequest("the listing has more than %d entries: list a smaller depth", maxListEntries)
				}
				child := path.Join(dir, info.Path)
				out.Entries = append(out.Entries, entryOf(child, info))
				if info.IsDir() && level < depth {
					if err := walk(child, level+1); err != nil {
						return err
					}
				}
			}
			return nil
		}
		return walk(rel, 1)
	})
	if err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(out), nil
}

// Remove removes a file or a directory with what it holds; a missing path is no error, as
// envd's RemoveAll.
func (s filesystemService) Remove(ctx context.Context, req *connect.Request[filesystem.RemoveRequest]) (*connect.Response[filesystem.RemoveResponse], error) {
	err := s.f.at(ctx, req.Msg.GetPath(), func(run *client.Run, rel string) error {
		if rel == "." {
			return badRequest("the workspace root cannot be removed")
		}
		_, err := run.RemoveAll(ctx, rel)
		return err
	})
	if err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&filesystem.RemoveResponse{}), nil
}

func (s filesystemService) WatchDir(context.Context, *connect.Request[filesystem.WatchDirRequest], *connect.ServerStream[filesystem.WatchDirResponse]) error {
	return connectError(unsupported("watchDir is not supported by the E2B front end (docs/e2b.md)"))
}

func (s filesystemService) CreateWatcher(context.Context, *connect.Request[filesystem.CreateWatcherRequest]) (*connect.Response[filesystem.CreateWatcherResponse], error) {
	return nil, connectError(unsupported("watchers are not supported by the E2B front end (docs/e2b.md)"))
}

func (s filesystemService) GetWatcherEvents(context.Context, *connect.Request[filesystem.GetWatcherEventsRequest]) (*connect.Response[filesystem.GetWatcherEventsResponse], error) {
	return nil, connectError(unsupported("watchers are not supported by the E2B front end (docs/e2b.md)"))
}

func (s filesystemService) RemoveWatcher(context.Context, *connect.Request[filesystem.RemoveWatcherRequest]) (*connect.Response[filesystem.RemoveWatcherResponse], error) {
	return nil, connectError(unsupported("watchers are not supported by the E2B front end (docs/e2b.md)"))
}

// entryOf is envd's EntryInfo of a workspace entry at rel: its E2B path, the permission bits
// in mode and Go's FileMode text in permissions.
func entryOf(rel string, info client.FileInfo) *filesystem.EntryInfo {
	mode := info.Mode & fs.ModePerm
	e := &filesystem.EntryInfo{Name: path.Base(e2bPath(rel)), Path: e2bPath(rel), Size: info.Size, Mode: uint32(mode),
		Owner: fileOwner, Group: fileOwner, ModifiedTime: timestamppb.New(info.ModTime)}
	switch info.Type {
	case executionv1.FileType_FILE_TYPE_REGULAR:
		e.Type = filesystem.FileType_FILE_TYPE_FILE
	case executionv1.FileType_FILE_TYPE_DIRECTORY:
		e.Type, mode = filesystem.FileType_FILE_TYPE_DIRECTORY, mode|fs.ModeDir
	case executionv1.FileType_FILE_TYPE_SYMLINK:
		e.Type, mode = filesystem.FileType_FILE_TYPE_SYMLINK, mode|fs.ModeSymlink
		target := info.SymlinkTarget
		e.SymlinkTarget = &target
	}
	e.Permissions = mode.String()
	return e
}
