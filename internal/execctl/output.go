package execctl

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/execplane/execplane/pkg/client"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// emit prints a result: as JSON (value) with -o json, else as a table.
func (in *invocation) emit(value any, headers []string, rows [][]string) error {
	if in.cfg.Output == OutputJSON {
		return in.json(value)
	}
	return in.table(headers, rows)
}

// json writes v indented: proto messages in their canonical JSON mapping, other values with
// encoding/json. The output is stable (scripts and golden files compare it).
func (in *invocation) json(v any) error {
	var raw []byte
	var err error
	switch m := v.(type) {
	case proto.Message:
		raw, err = protojson.Marshal(m)
	case []proto.Message:
		parts := make([]json.RawMessage, len(m))
		for i, x := range m {
			if parts[i], err = protojson.Marshal(x); err != nil {
				return err
			}
		}
		raw, err = json.Marshal(parts)
	default:
		raw, err = json.Marshal(v)
	}
	if err != nil {
		return err
	}
	var compact, out bytes.Buffer
	if err := json.Compact(&compact, raw); err != nil {
		return err
	}
	if err := json.Indent(&out, compact.Bytes(), "", "  "); err != nil {
		return err
	}
	out.WriteByte('\n')
	_, err = in.out.Write(out.Bytes())
	return err
}

// table writes rows under headers, columns aligned.
func (in *invocation) table(headers []string, rows [][]string) error {
	w := tabwriter.NewWriter(in.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, strings.Join(headers, "\t"))
	for _, r := range rows {
		fmt.Fprintln(w, strings.Join(r, "\t"))
	}
	return w.Flush()
}

// environmentRows is an environment as one table row.
var environmentHeaders = []string{"ID", "REVISION", "BINDING", "PROFILE", "LIFECYCLE", "READY", "FENCE", "EPOCH", "GENERATION", "RUN"}

func environmentRow(e *executionv1.Environment) []string {
	run := "-"
	if r := e.GetActiveRun(); r != nil {
		run = r.GetRunId()
	}
	return []string{e.GetRef().GetId(), e.GetRef().GetRevision(), e.GetBindingId(), e.GetProfile(),
		trimEnum(e.GetLifecycle().String(), "LIFECYCLE_STATE_"), strconv.FormatBool(e.GetReady()),
		trimEnum(e.GetFenceState().String(), "FENCE_STATE_"), strconv.FormatUint(e.GetEpoch(), 10),
		strconv.FormatUint(e.GetGrantGeneration(), 10), run}
}

func (in *invocation) emitEnvironment(e *executionv1.Environment) error {
	return in.emit(e, environmentHeaders, [][]string{environmentRow(e)})
}

var fileHeaders = []string{"TYPE", "MODE", "SIZE", "MODIFIED", "VERSION", "PATH"}

func fileRow(f client.FileInfo) []string {
	path := escape(f.Path)
	if f.SymlinkTarget != "" {
		path += " -> " + escape(f.SymlinkTarget)
	}
	version := f.Version
	if version == "" {
		version = "-"
	}
	return []string{trimEnum(f.Type.String(), "FILE_TYPE_"), fmt.Sprintf("%04o", uint32(f.Mode)), strconv.FormatInt(f.Size, 10),
		f.ModTime.UTC().Format(time.RFC3339), version, path}
}

// fileJSON is a FileInfo for -o json.
type fileJSON struct {
	Path          string    `json:"path"`
	Type          string    `json:"type"`
	Size          int64     `json:"size"`
	Mode          string    `json:"mode"`
	ModTime       time.Time `json:"modifiedAt"`
	Version       string    `json:"version,omitempty"`
	SymlinkTarget string    `json:"symlinkTarget,omitempty"`
}

func fileValue(f client.FileInfo) fileJSON {
	return fileJSON{Path: f.Path, Type: trimEnum(f.Type.String(), "FILE_TYPE_"), Size: f.Size, Mode: fmt.Sprintf("%04o", uint32(f.Mode)),
		ModTime: f.ModTime.UTC(), Version: f.Version, SymlinkTarget: f.SymlinkTarget}
}

func trimEnum(s, prefix string) string { return strings.TrimPrefix(s, prefix) }

// escape shows a workspace name safely on a terminal: a name with control characters (C0,
// C1), bidirectional overrides, other unprintable runes or invalid UTF-8 is quoted, never
// written raw.
func escape(s string) string {
	if !utf8.ValidString(s) {
		return strconv.Quote(s)
	}
	for _, r := range s {
		if !unicode.IsPrint(r) && r != ' ' || unicode.Is(unicode.Bidi_Control, r) {
			return strconv.QuoteToASCII(s)
		}
	}
	return s
}

// profileJSON is a profile for -o json.
type profileJSON struct {
	Name               string   `json:"name"`
	Digest             string   `json:"digest"`
	MaxFileBytes       uint64   `json:"maxFileBytes"`
	MaxCommandBytes    uint64   `json:"maxCommandBytes"`
	MaxCommandDuration string   `json:"maxCommandDuration"`
	Capabilities       []string `json:"capabilities,omitempty"`
}

func profileValue(p client.Profile) profileJSON {
	return profileJSON{Name: p.Name, Digest: p.Digest, MaxFileBytes: p.MaxFileBytes, MaxCommandBytes: p.MaxCommandBytes,
		MaxCommandDuration: p.MaxCommandDuration.String(), Capabilities: p.Capabilities}
}

// outputJSON is a captured stream for -o json: its head and (when it overflowed the cap)
// tail, each as text when valid UTF-8, else as base64 — never altered.
type outputJSON struct {
	Head       *string `json:"head,omitempty"`
	HeadBase64 []byte  `json:"headBase64,omitempty"`
	Tail       *string `json:"tail,omitempty"`
	TailBase64 []byte  `json:"tailBase64,omitempty"`
	TotalBytes uint64  `json:"totalBytes"`
	Truncated  bool    `json:"truncated"`
}

func outputValue(o client.Output) outputJSON {
	v := outputJSON{TotalBytes: o.Total, Truncated: o.Truncated}
	v.Head, v.HeadBase64 = textOrBytes(o.Head)
	if len(o.Tail) > 0 {
		v.Tail, v.TailBase64 = textOrBytes(o.Tail)
	}
	return v
}

func textOrBytes(b []byte) (*string, []byte) {
	if utf8.Valid(b) {
		s := string(b)
		return &s, nil
	}
	return nil, b
}

// commandJSON is a command's result for -o json.
type commandJSON struct {
	State     string     `json:"state"`
	ExitCode  int        `json:"exitCode"`
	Signal    int        `json:"signal,omitempty"`
	Stdout    outputJSON `json:"stdout"`
	Stderr    outputJSON `json:"stderr"`
	StartedAt time.Time  `json:"startedAt"`
	Duration  string     `json:"duration"`
	Message   string     `json:"message,omitempty"`
	Receipt   string     `json:"receipt"`
}

func commandValue(r *client.CommandResult) commandJSON {
	return commandJSON{State: trimEnum(r.State.String(), "COMMAND_STATE_"), ExitCode: r.ExitCode, Signal: r.Signal,
		Stdout: outputValue(r.Stdout), Stderr: outputValue(r.Stderr), StartedAt: r.StartedAt.UTC(), Duration: r.Duration.String(),
		Message: r.Message, Receipt: r.Receipt}
}

// grepJSON is a grep result for -o json.
type grepJSON struct {
	Matches       []grepMatchJSON `json:"matches"`
	Truncated     bool            `json:"truncated"`
	FilesSearched uint64          `json:"filesSearched"`
	FilesSkipped  uint64          `json:"filesSkipped"`
}

type grepMatchJSON struct {
	Path string `json:"path"`
	Line uint64 `json:"line"`
	Text string `json:"text"`
}

func grepValue(g client.GrepResult) grepJSON {
	v := grepJSON{Matches: []grepMatchJSON{}, Truncated: g.Truncated, FilesSearched: g.FilesSearched, FilesSkipped: g.FilesSkipped}
	for _, m := range g.Matches {
		v.Matches = append(v.Matches, grepMatchJSON{Path: m.Path, Line: m.Line, Text: m.Text})
	}
	return v
}
