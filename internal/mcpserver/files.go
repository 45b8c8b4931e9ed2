package mcpserver

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/execplane/execplane/pkg/client"
)

// defaultReadBytes is how much read_file returns when the agent names no length: a file
// larger than this is read in pieces (offset, more), so that one answer does not fill the
// model's context. The profile's maxFileBytes bounds any one read beyond this.
const defaultReadBytes = 256 << 10

// maxListEntries bounds list_directory's answer, for the same reason; truncated says so.
const maxListEntries = 2000

// Encodings of file content in tool inputs and outputs.
const (
	encodingUTF8   = "utf-8"
	encodingBase64 = "base64"
)

// FileView describes one file system object.
type FileView struct {
	Path    string `json:"path"`
	Type    string `json:"type" jsonschema:"FILE, DIRECTORY or SYMLINK"`
	Size    int64  `json:"size"`
	Mode    string `json:"mode,omitempty" jsonschema:"permission bits, octal"`
	ModTime string `json:"mod_time,omitempty" jsonschema:"RFC 3339"`
	Version string `json:"version,omitempty" jsonschema:"a regular file's content version, for write_file's if_version"`
	Target  string `json:"symlink_target,omitempty"`
}

func viewOf(f client.FileInfo) FileView {
	v := FileView{Path: f.Path, Type: strings.TrimPrefix(f.Type.String(), "FILE_TYPE_"), Size: f.Size, Version: f.Version, Target: f.SymlinkTarget}
	if f.Mode != 0 {
		v.Mode = fmt.Sprintf("%04o", uint32(f.Mode.Perm()))
	}
	if !f.ModTime.IsZero() {
		v.ModTime = f.ModTime.UTC().Format(time.RFC3339Nano)
	}
	return v
}

// ReadInput is read_file's input.
type ReadInput struct {
	Path   string `json:"path" jsonschema:"the file, relative to the workspace root"`
	Offset uint64 `json:"offset,omitempty" jsonschema:"the byte to start at (0: the start)"`
	Length uint64 `json:"length,omitempty" jsonschema:"at most this many bytes (default 262144; the profile bounds it)"`
}

// ReadOutput is read_file's answer.
type ReadOutput struct {
	Content  string   `json:"content"`
	Encoding string   `json:"encoding" jsonschema:"utf-8, or base64 when the bytes are not UTF-8 text"`
	Offset   uint64   `json:"offset"`
	More     bool     `json:"more" jsonschema:"bytes follow: read again at offset + the bytes returned"`
	File     FileView `json:"file"`
}

// WriteInput is write_file's input.
type WriteInput struct {
	Path          string `json:"path" jsonschema:"the file, relative to the workspace root"`
	Content       string `json:"content"`
	Encoding      string `json:"encoding,omitempty" jsonschema:"utf-8 (the default) or base64"`
	IfVersion     string `json:"if_version,omitempty" jsonschema:"write only if the file still has this version (from read_file or stat): compare-and-swap"`
	CreateOnly    bool   `json:"create_only,omitempty" jsonschema:"write only if the file does not exist"`
	CreateParents bool   `json:"create_parents,omitempty" jsonschema:"create missing parent directories"`
	Mode          string `json:"mode,omitempty" jsonschema:"permission bits in octal (e.g. 0755) for a new file"`
}

// PathInput names one path.
type PathInput struct {
	Path string `json:"path" jsonschema:"relative to the workspace root (empty: the root)"`
}

// ListOutput is list_directory's answer.
type ListOutput struct {
	Entries   []FileView `json:"entries"`
	Truncated bool       `json:"truncated,omitempty"`
}

// GlobInput is glob's input.
type GlobInput struct {
	Pattern string `json:"pattern" jsonschema:"'*', '?', '[...]' within a path component, '**' for any depth (e.g. src/**/*.go)"`
	Base    string `json:"base,omitempty" jsonschema:"the directory to match beneath (empty: the root)"`
}

// GlobOutput is glob's answer.
type GlobOutput struct {
	Paths     []string `json:"paths"`
	Truncated bool     `json:"truncated,omitempty"`
}

// GrepInput is grep's input.
type GrepInput struct {
	Pattern    string `json:"pattern" jsonschema:"an RE2 regular expression, matched line by line"`
	Path       string `json:"path,omitempty" jsonschema:"a file or directory (empty: the root)"`
	Include    string `json:"include,omitempty" jsonschema:"a shell pattern on file names (e.g. *.py)"`
	IgnoreCase bool   `json:"ignore_case,omitempty"`
	MaxMatches uint32 `json:"max_matches,omitempty" jsonschema:"1..10000 (1000 when 0)"`
}

// GrepOutput is grep's answer.
type GrepOutput struct {
	Matches       []GrepMatch `json:"matches"`
	Truncated     bool        `json:"truncated,omitempty"`
	FilesSearched uint64      `json:"files_searched"`
}

// GrepMatch is one matching line.
type GrepMatch struct {
	Path string `json:"path"`
	Line uint64 `json:"line"`
	Text string `json:"text"`
}

// RemoveInput is remove's input.
type RemoveInput struct {
	Path      string `json:"path"`
	Recursive bool   `json:"recursive,omitempty" jsonschema:"remove a directory and everything beneath it"`
}

// RemoveOutput is remove's answer.
type RemoveOutput struct {
	Removed uint64 `json:"removed" jsonschema:"objects removed"`
}

// RenameInput is rename's input.
type RenameInput struct {
	From      string `json:"from"`
	To        string `json:"to"`
	Overwrite bool   `json:"overwrite,omitempty" jsonschema:"replace an existing destination"`
}

func (s *Server) addFileTools(m *mcp.Server) {
	readOnly := &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: ptr(false)}
	addRunTool(s, m, &mcp.Tool{Name: "read_file", Annotations: readOnly,
		Description: "Read a file of the workspace (a piece of it: offset, length). Text comes back as utf-8, other bytes as base64; version is what write_file's if_version takes."},
		func(ctx context.Context, run *client.Run, in ReadInput) (ReadOutput, error) {
			if in.Length == 0 {
				in.Length = defaultReadBytes
			}
			c, err := run.ReadRange(ctx, in.Path, in.Offset, in.Length)
			if err != nil {
				return ReadOutput{}, err
			}
			out := ReadOutput{Offset: in.Offset, More: c.More, File: viewOf(c.Info), Content: string(c.Content), Encoding: encodingUTF8}
			if !utf8.Valid(c.Content) {
				out.Content, out.Encoding = base64.StdEncoding.EncodeToString(c.Content), encodingBase64
			}
			return out, nil
		})
	addRunTool(s, m, &mcp.Tool{Name: "write_file", Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), OpenWorldHint: ptr(false)},
		Description: "Write a whole file of the workspace, atomically (readers see the old or the new content). With if_version, only if the file is unchanged since it was read (VERSION_MISMATCH otherwise); with create_only, only if it does not exist."},
		func(ctx context.Context, run *client.Run, in WriteInput) (FileView, error) {
			content, opts, err := writeArgs(in)
			if err != nil {
				return FileView{}, err
			}
			info, err := run.WriteFile(ctx, in.Path, content, opts...)
			return viewOf(info), err
		})
	addRunTool(s, m, &mcp.Tool{Name: "stat", Annotations: readOnly,
		Description: "Describe a file, directory or symlink of the workspace: type, size, mode, modification time, and a regular file's version."},
		func(ctx context.Context, run *client.Run, in PathInput) (FileView, error) {
			info, err := run.Stat(ctx, in.Path)
			return viewOf(info), err
		})
	addRunTool(s, m, &mcp.Tool{Name: "list_directory", Annotations: readOnly,
		Description: "List a directory of the workspace (its entries, not recursively; use glob for a tree)."},
		func(ctx context.Context, run *client.Run, in PathInput) (ListOutput, error) {
			out := ListOutput{Entries: []FileView{}}
			for info, err := range run.List(ctx, in.Path) {
				if err != nil {
					return ListOutput{}, err
				}
				if len(out.Entries) == maxListEntries {
					out.Truncated = true
					break
				}
				out.Entries = append(out.Entries, viewOf(info))
			}
			return out, nil
		})
	addRunTool(s, m, &mcp.Tool{Name: "glob", Annotations: readOnly,
		Description: "Find paths of the workspace matching a pattern ('**' for any depth), sorted."},
		func(ctx context.Context, run *client.Run, in GlobInput) (GlobOutput, error) {
			g, err := run.Glob(ctx, in.Pattern, in.Base)
			if g.Paths == nil {
				g.Paths = []string{}
			}
			return GlobOutput{Paths: g.Paths, Truncated: g.Truncated}, err
		})
	addRunTool(s, m, &mcp.Tool{Name: "grep", Annotations: readOnly,
		Description: "Search the workspace's regular files for an RE2 expression, line by line: path, line number and text of each match."},
		func(ctx context.Context, run *client.Run, in GrepInput) (GrepOutput, error) {
			g, err := run.Grep(ctx, client.GrepRequest{Pattern: in.Pattern, Path: in.Path, Include: in.Include, IgnoreCase: in.IgnoreCase, MaxMatches: in.MaxMatches})
			out := GrepOutput{Matches: []GrepMatch{}, Truncated: g.Truncated, FilesSearched: g.FilesSearched}
			for _, m := range g.Matches {
				out.Matches = append(out.Matches, GrepMatch{Path: m.Path, Line: m.Line, Text: m.Text})
			}
			return out, err
		})
	addRunTool(s, m, &mcp.Tool{Name: "remove", Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: false, OpenWorldHint: ptr(false)},
		Description: "Remove a file or an empty directory of the workspace; with recursive, a directory and everything beneath it."},
		func(ctx context.Context, run *client.Run, in RemoveInput) (RemoveOutput, error) {
			if in.Recursive {
				n, err := run.RemoveAll(ctx, in.Path)
				return RemoveOutput{Removed: n}, err
			}
			if err := run.Remove(ctx, in.Path); err != nil {
				return RemoveOutput{}, err
			}
			return RemoveOutput{Removed: 1}, nil
		})
	addRunTool(s, m, &mcp.Tool{Name: "rename", Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), OpenWorldHint: ptr(false)},
		Description: "Rename (move) a file or directory within the workspace; an existing destination is refused unless overwrite."},
		func(ctx context.Context, run *client.Run, in RenameInput) (FileView, error) {
			var opts []client.MoveOption
			if in.Overwrite {
				opts = append(opts, client.Overwrite())
			}
			info, err := run.Rename(ctx, in.From, in.To, opts...)
			return viewOf(info), err
		})
}

// writeArgs decodes write_file's content and options; a bad one is refused before any call.
func writeArgs(in WriteInput) ([]byte, []client.WriteOption, error) {
	var content []byte
	switch in.Encoding {
	case "", encodingUTF8:
		content = []byte(in.Content)
	case encodingBase64:
		b, err := base64.StdEncoding.DecodeString(in.Content)
		if err != nil {
			return nil, nil, errorf(errInvalidArgument, "content is not base64: %v", err)
		}
		content = b
	default:
		return nil, nil, errorf(errInvalidArgument, "encoding %q: want utf-8 or base64", in.Encoding)
	}
	var opts []client.WriteOption
	if in.IfVersion != "" && in.CreateOnly {
		return nil, nil, errorf(errInvalidArgument, "if_version and create_only exclude each other")
	}
	if in.IfVersion != "" {
		opts = append(opts, client.IfVersion(in.IfVersion))
	}
	if in.CreateOnly {
		opts = append(opts, client.CreateOnly())
	}
	if in.CreateParents {
		opts = append(opts, client.CreateParents())
	}
	if in.Mode != "" {
		var mode uint32
		if _, err := fmt.Sscanf(in.Mode, "%o", &mode); err != nil || mode > 0o777 {
			return nil, nil, errorf(errInvalidArgument, "mode %q: want octal permission bits such as 0644", in.Mode)
		}
		opts = append(opts, client.WithMode(fs.FileMode(mode)))
	}
	return content, opts, nil
}

// errInvalidArgument marks an input refused here, before any call.
var errInvalidArgument = errors.New("INVALID_ARGUMENT")

// addRunTool adds a tool that acts under the run claim, within the call timeout; its
// failures become tool errors with the API's reason.
func addRunTool[In, Out any](s *Server, m *mcp.Server, t *mcp.Tool, do func(context.Context, *client.Run, In) (Out, error)) {
	mcp.AddTool(m, t, func(ctx context.Context, _ *mcp.CallToolRequest, in In) (*mcp.CallToolResult, Out, error) {
		var zero Out
		run, err := s.held(ctx)
		if err != nil {
			return nil, zero, toolError(err)
		}
		ctx, cancel := s.callContext(ctx)
		defer cancel()
		out, err := do(ctx, run, in)
		if err != nil {
			return nil, zero, toolError(err)
		}
		return nil, out, nil
	})
}
