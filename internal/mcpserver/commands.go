package mcpserver

import (
	"context"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/execplane/execplane/pkg/client"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// keepHead and keepTail bound what run_command returns of each stream: its first and last
// bytes, with a marker between when more was written. A build's log is mostly noise in the
// middle; its start and its end (the error) are what the agent acts on. The profile's spool
// keeps more: command_status pages through all it kept.
const (
	keepHead = 32 << 10
	keepTail = 32 << 10
)

// progressMessageBytes bounds the output carried by one progress notification.
const progressMessageBytes = 4 << 10

// defaultStatusBytes is how much output command_status returns per call when not told.
const defaultStatusBytes = 64 << 10

// maxStatusWait bounds command_status's wait: an MCP client's request times out on its own
// (a minute by default in the TypeScript SDK), and the agent can always ask again.
const maxStatusWait = 50 * time.Second

// CommandInput is run_command's input.
type CommandInput struct {
	Command        string            `json:"command,omitempty" jsonschema:"a script for /bin/sh -c (give this or argv)"`
	Argv           []string          `json:"argv,omitempty" jsonschema:"the program and its arguments, run without a shell (give this or command)"`
	Cwd            string            `json:"cwd,omitempty" jsonschema:"the working directory, relative to the workspace root"`
	Env            map[string]string `json:"env,omitempty" jsonschema:"environment variables added for the command"`
	Stdin          string            `json:"stdin,omitempty" jsonschema:"text written to the command's stdin, then end of file"`
	TimeoutSeconds int               `json:"timeout_seconds,omitempty" jsonschema:"the command's wall-clock limit (the profile's maximum when 0)"`
	Detach         bool              `json:"detach,omitempty" jsonschema:"start it and return its command_id at once; it runs on (poll with command_status)"`
	CommandID      string            `json:"command_id,omitempty" jsonschema:"with detach: its id (1..64 of [A-Za-z0-9._-]); starting the same id and command again does not run it twice"`
}

// StreamView is what a result keeps of one output stream.
type StreamView struct {
	Text      string `json:"text"`
	Bytes     uint64 `json:"bytes" jsonschema:"every byte written"`
	Truncated bool   `json:"truncated,omitempty" jsonschema:"bytes were left out in the middle"`
}

// CommandView is a command's state and, once it ended, how.
type CommandView struct {
	CommandID  string      `json:"command_id"`
	State      string      `json:"state" jsonschema:"RUNNING, SUCCEEDED, FAILED, TIMED_OUT, CANCELLED, ..."`
	ExitCode   *int        `json:"exit_code,omitempty"`
	Signal     int         `json:"signal,omitempty"`
	DurationMS int64       `json:"duration_ms,omitempty"`
	Message    string      `json:"message,omitempty"`
	Stdout     *StreamView `json:"stdout,omitempty"`
	Stderr     *StreamView `json:"stderr,omitempty"`
}

// StatusInput is command_status's input.
type StatusInput struct {
	CommandID    string `json:"command_id"`
	StdoutOffset uint64 `json:"stdout_offset,omitempty" jsonschema:"return stdout from this byte (the previous answer's next_stdout_offset)"`
	StderrOffset uint64 `json:"stderr_offset,omitempty" jsonschema:"return stderr from this byte"`
	MaxBytes     int    `json:"max_bytes,omitempty" jsonschema:"at most this much output (default 65536)"`
	WaitSeconds  int    `json:"wait_seconds,omitempty" jsonschema:"wait up to this long (at most 50) for the command to end first"`
}

// StatusOutput is command_status's answer: the command and its output from the offsets.
type StatusOutput struct {
	Command          CommandView `json:"command"`
	StdoutText       string      `json:"stdout_text"`
	StderrText       string      `json:"stderr_text"`
	NextStdoutOffset uint64      `json:"next_stdout_offset"`
	NextStderrOffset uint64      `json:"next_stderr_offset"`
	Skipped          uint64      `json:"skipped_bytes,omitempty" jsonschema:"bytes asked for that the spool no longer keeps"`
}

// CancelInput is cancel_command's input.
type CancelInput struct {
	CommandID    string `json:"command_id"`
	GraceSeconds int    `json:"grace_seconds,omitempty" jsonschema:"SIGTERM, then SIGKILL after this long (the server's default when 0)"`
}

func (s *Server) addCommandTools(m *mcp.Server) {
	mcp.AddTool(m, &mcp.Tool{Name: "run_command", Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), OpenWorldHint: ptr(true)},
		Description: "Run a command in the workspace (a shell script, or argv) and return how it ended with its output (the first and last 32 KiB of each stream). " +
			"Its output is streamed as progress notifications when the client asks for progress. With detach it returns a command_id at once and runs on: poll it with command_status, stop it with cancel_command."},
		func(ctx context.Context, req *mcp.CallToolRequest, in CommandInput) (*mcp.CallToolResult, CommandView, error) {
			c, err := commandOf(in)
			if err != nil {
				return nil, CommandView{}, toolError(err)
			}
			run, err := s.held(ctx)
			if err != nil {
				return nil, CommandView{}, toolError(err)
			}
			if in.Detach {
				info, err := run.Start(ctx, c, client.StartOptions{ID: in.CommandID})
				if err != nil {
					return nil, CommandView{}, toolError(err)
				}
				return nil, commandView(info), nil
			}
			if in.CommandID != "" {
				return nil, CommandView{}, toolError(errorf(errInvalidArgument, "command_id names a detached command: give detach too"))
			}
			view, err := s.stream(ctx, req, run, c)
			if err != nil {
				return nil, CommandView{}, toolError(err)
			}
			return nil, view, nil
		})
	addRunTool(s, m, &mcp.Tool{Name: "command_status", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: ptr(false)},
		Description: "A detached command's state and its output from the given offsets (page with next_stdout_offset and next_stderr_offset); wait_seconds waits for it to end first."},
		func(ctx context.Context, run *client.Run, in StatusInput) (StatusOutput, error) {
			if in.WaitSeconds > 0 {
				wait := min(time.Duration(in.WaitSeconds)*time.Second, maxStatusWait)
				wctx, cancel := context.WithTimeout(ctx, wait)
				_, err := run.Wait(wctx, in.CommandID)
				cancel()
				if err != nil && wctx.Err() == nil {
					return StatusOutput{}, err
				}
			}
			if in.MaxBytes <= 0 {
				in.MaxBytes = defaultStatusBytes
			}
			info, chunks, err := run.Status(ctx, in.CommandID, client.Cursor{Stdout: in.StdoutOffset, Stderr: in.StderrOffset}, in.MaxBytes)
			if err != nil {
				return StatusOutput{}, err
			}
			out := StatusOutput{Command: commandView(info), NextStdoutOffset: in.StdoutOffset, NextStderrOffset: in.StderrOffset}
			var stdout, stderr strings.Builder
			for _, c := range chunks {
				out.Skipped += c.Skipped
				end := c.Offset + uint64(len(c.Data))
				if c.Stream == executionv1.OutputStream_OUTPUT_STREAM_STDERR {
					stderr.Write(c.Data)
					out.NextStderrOffset = max(out.NextStderrOffset, end)
				} else {
					stdout.Write(c.Data)
					out.NextStdoutOffset = max(out.NextStdoutOffset, end)
				}
			}
			out.StdoutText, out.StderrText = strings.ToValidUTF8(stdout.String(), "\uFFFD"), strings.ToValidUTF8(stderr.String(), "\uFFFD")
			return out, nil
		})
	addRunTool(s, m, &mcp.Tool{Name: "cancel_command", Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: true, OpenWorldHint: ptr(false)},
		Description: "Stop a detached command: SIGTERM to its process group, SIGKILL after the grace period."},
		func(ctx context.Context, run *client.Run, in CancelInput) (CommandView, error) {
			info, err := run.Cancel(ctx, in.CommandID, time.Duration(in.GraceSeconds)*time.Second)
			if err != nil {
				return CommandView{}, err
			}
			return commandView(info), nil
		})
}

// commandOf checks run_command's input and builds the command; a bad one is refused before
// any call.
func commandOf(in CommandInput) (client.Command, error) {
	if (in.Command == "") == (len(in.Argv) == 0) {
		return client.Command{}, errorf(errInvalidArgument, "give either command (a shell script) or argv")
	}
	if in.TimeoutSeconds < 0 {
		return client.Command{}, errorf(errInvalidArgument, "timeout_seconds is negative")
	}
	c := client.Command{Args: in.Argv, Shell: in.Command, Dir: in.Cwd, Env: in.Env, Timeout: time.Duration(in.TimeoutSeconds) * time.Second}
	if in.Stdin != "" {
		c.Stdin = []byte(in.Stdin)
	}
	return c, nil
}

// stream runs a foreground command to its end, its output sent as progress notifications
// when the client gave a progress token. Ending the call (the client cancels it, or goes
// away) cancels the command.
func (s *Server) stream(ctx context.Context, req *mcp.CallToolRequest, run *client.Run, c client.Command) (CommandView, error) {
	token := req.Params.GetProgressToken()
	var stdout, stderr capture
	var view CommandView
	for ev, err := range run.Stream(ctx, c, client.StreamOptions{}) {
		if err != nil {
			return CommandView{}, err
		}
		switch {
		case ev.Started != nil:
			view.CommandID = ev.Started.ID
		case ev.Output != nil:
			w := &stdout
			if ev.Output.Stream == executionv1.OutputStream_OUTPUT_STREAM_STDERR {
				w = &stderr
			}
			w.write(ev.Output.Data)
			if token != nil {
				msg := ev.Output.Data
				if len(msg) > progressMessageBytes {
					msg = msg[:progressMessageBytes]
				}
				// Best effort: a client that stopped listening still gets the result.
				_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token,
					Progress: float64(stdout.total + stderr.total), Message: strings.ToValidUTF8(string(msg), "\uFFFD")})
			}
		case ev.Ended != nil:
			view = commandView(ev.Ended)
		}
	}
	view.Stdout, view.Stderr = stdout.view(), stderr.view()
	return view, nil
}

func commandView(i *client.CommandInfo) CommandView {
	v := CommandView{CommandID: i.ID, State: strings.TrimPrefix(i.State.String(), "COMMAND_STATE_"), Message: i.Message}
	if r := i.Result; r != nil {
		switch r.State {
		case executionv1.CommandState_COMMAND_STATE_SUCCEEDED, executionv1.CommandState_COMMAND_STATE_FAILED:
			code := r.ExitCode
			v.ExitCode = &code
		}
		v.Signal, v.DurationMS = r.Signal, r.Duration.Milliseconds()
		if r.Message != "" {
			v.Message = r.Message
		}
	}
	return v
}

// capture keeps a stream's first keepHead and last keepTail bytes and counts them all.
type capture struct {
	head, tail []byte
	total      uint64
}

func (c *capture) write(p []byte) {
	c.total += uint64(len(p))
	if room := keepHead - len(c.head); room > 0 {
		n := min(room, len(p))
		c.head = append(c.head, p[:n]...)
		p = p[n:]
	}
	if len(p) == 0 {
		return
	}
	c.tail = append(c.tail, p...)
	if over := len(c.tail) - keepTail; over > 0 {
		c.tail = append(c.tail[:0], c.tail[over:]...)
	}
}

func (c *capture) view() *StreamView {
	kept := uint64(len(c.head) + len(c.tail))
	v := &StreamView{Bytes: c.total, Truncated: kept < c.total}
	text := string(c.head)
	if v.Truncated {
		text += "\n[... " + strconv.FormatUint(c.total-kept, 10) + " bytes left out ...]\n"
	}
	text += string(c.tail)
	if !utf8.ValidString(text) {
		text = strings.ToValidUTF8(text, "\uFFFD")
	}
	v.Text = text
	return v
}
