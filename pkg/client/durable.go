package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"iter"
	"maps"
	mrand "math/rand/v2"
	"slices"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// Durable commands (docs/commands.md): commands with an id whose output and end are kept
// on the workspace volume, streamed as they come and read again from any offset.

// Stream names a command's output stream.
type Stream = executionv1.OutputStream

// The output streams.
const (
	Stdout = executionv1.OutputStream_OUTPUT_STREAM_STDOUT
	Stderr = executionv1.OutputStream_OUTPUT_STREAM_STDERR
)

// Cursor is where a reader of a command's output is, per stream: the offset of the next byte
// it wants. The zero Cursor is the start.
type Cursor struct {
	Stdout, Stderr uint64
}

// Advance moves the cursor past a chunk.
func (c *Cursor) Advance(o OutputChunk) {
	end := o.Offset + uint64(len(o.Data))
	if o.Stream == Stderr {
		c.Stderr = end
	} else {
		c.Stdout = end
	}
}

// at is the cursor's offset for a stream.
func (c Cursor) at(s Stream) uint64 {
	if s == Stderr {
		return c.Stderr
	}
	return c.Stdout
}

func (c Cursor) proto() *executionv1.OutputCursor {
	return &executionv1.OutputCursor{Stdout: c.Stdout, Stderr: c.Stderr}
}

// OutputChunk is a piece of one stream: Data starts at Offset; Skipped bytes before it were
// asked for but no longer kept (the middle of a stream longer than the profile's spool).
type OutputChunk struct {
	Stream  Stream
	Offset  uint64
	Skipped uint64
	Data    []byte
}

// CommandInfo describes a durable command.
type CommandInfo struct {
	ID string
	// State is RUNNING until it ends, then how it ended.
	State     executionv1.CommandState
	RunID     string
	Epoch     uint64
	StartedAt time.Time
	Detached  bool
	// StdoutBytes and StderrBytes count what it wrote so far (exact once ended).
	StdoutBytes, StderrBytes uint64
	// Result is how it ended; nil while it runs. Its output carries totals only: read the
	// output itself with Output or Status.
	Result *CommandResult
	// Message says why output stopped being kept, or why the command was abandoned.
	Message string
	// Program is what it runs, as recorded (argv or shell, working directory).
	Program *executionv1.CommandProgram
}

// Running reports whether the command has not ended.
func (i *CommandInfo) Running() bool {
	return i.State == executionv1.CommandState_COMMAND_STATE_RUNNING
}

// End is the cursor past the command's output so far.
func (i *CommandInfo) End() Cursor { return Cursor{Stdout: i.StdoutBytes, Stderr: i.StderrBytes} }

// StartOptions configure Start and Stream.
type StartOptions struct {
	// ID names the command (1..64 bytes of [A-Za-z0-9._-]); empty means one is generated.
	// Starting the same ID with the same command again, in the same run, answers the
	// command the first start started — which is what makes a start safe to retry — and
	// with another command, or from another run, fails with ErrOperationIDReused.
	ID string
}

// StreamOptions configure Stream.
type StreamOptions struct {
	StartOptions
	// Detach lets the command outlive the stream: when ctx ends first, it goes on and
	// Output reattaches. Otherwise ending the stream cancels it, as a foreground command's.
	Detach bool
}

// Event is one step of a streamed command: Started first, then output chunks, then Ended.
type Event struct {
	Started *CommandInfo
	Output  *OutputChunk
	Ended   *CommandInfo
}

// newCommandID names a command so that retries of its start are recognised.
func newCommandID() string {
	var b [10]byte
	_, _ = rand.Read(b[:])
	return "c-" + strconv.FormatInt(time.Now().UnixMilli(), 36) + "-" + hex.EncodeToString(b[:])
}

func specOf(c Command) *executionv1.CommandSpec {
	spec := &executionv1.CommandSpec{WorkingDirectory: []byte(c.Dir), Stdin: c.Stdin}
	if c.Shell != "" {
		spec.Program = &executionv1.CommandSpec_Shell{Shell: c.Shell}
	} else {
		spec.Program = &executionv1.CommandSpec_Argv{Argv: &executionv1.Argv{Args: c.Args}}
	}
	for _, k := range slices.Sorted(maps.Keys(c.Env)) {
		spec.Environment = append(spec.Environment, &executionv1.EnvironmentVariable{Name: k, Value: c.Env[k]})
	}
	if c.Timeout > 0 {
		spec.Timeout = durationpb.New(c.Timeout)
	}
	return spec
}

// Start starts a detached durable command and returns at once: it runs until it ends, its
// timeout (at most the profile's commands.maxDuration) or Cancel, whoever follows it. The
// start carries its ID, so it is retried after a lost answer without running twice.
func (r *Run) Start(ctx context.Context, c Command, opts StartOptions) (*CommandInfo, error) {
	g, err := r.runGrant()
	if err != nil {
		return nil, err
	}
	id := opts.ID
	if id == "" {
		id = newCommandID()
	}
	req := &executionv1.StartCommandRequest{RunGrant: g, Environment: r.env.Ref(), Command: specOf(c), Detach: true, CommandId: id}
	resp, err := call(ctx, r.env.c, idempotent, func(ctx context.Context, opts ...grpc.CallOption) (*executionv1.StartCommandResponse, error) {
		return r.env.c.api.StartCommand(ctx, req, opts...)
	})
	if err != nil {
		return nil, err
	}
	return infoOf(resp.GetCommand()), nil
}

// Stream runs a durable command and yields its events as they come: Started, its output as
// it is written, Ended. Unless opts.Detach, stopping the iteration or ending ctx cancels
// the command. A stream whose gateway went away reattaches through Output from the last
// offsets, so no byte is lost or yielded twice; an attached command lives on for that while
// it is followed again within seconds — but a call that broke while its gateway lived was
// ended by that gateway, and with it an attached command (the reattachment then yields its
// end, CANCELLED).
func (r *Run) Stream(ctx context.Context, c Command, opts StreamOptions) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		g, err := r.runGrant()
		if err != nil {
			yield(Event{}, err)
			return
		}
		id := opts.ID
		if id == "" {
			id = newCommandID()
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		st, err := r.env.c.api.RunCommand(ctx, &executionv1.RunCommandRequest{RunGrant: g, Environment: r.env.Ref(),
			Command: specOf(c), CommandId: id, Detach: opts.Detach})
		if err != nil {
			yield(Event{}, asError(err, ""))
			return
		}
		var cursor Cursor
		started := false
		for {
			ev, err := st.Recv()
			if err != nil {
				if errors.Is(err, io.EOF) {
					return
				}
				err = asError(err, "")
				if !started || !reattachable(err) || ctx.Err() != nil {
					yield(Event{}, err)
					return
				}
				// The call broke after the command started: follow it from where we are.
				for e, err := range r.follow(ctx, id, cursor) {
					if !yield(e, err) || err != nil {
						return
					}
				}
				return
			}
			e := eventOf(ev)
			if e.Started != nil {
				started = true
			}
			if e.Output != nil {
				if e.Output.Offset-e.Output.Skipped != cursor.at(e.Output.Stream) {
					yield(Event{}, &Error{Code: codes.Internal, Message: "the output does not continue from the cursor"})
					return
				}
				cursor.Advance(*e.Output)
			}
			if !yield(e, nil) {
				return // the deferred cancel ends the call: an attached command ends with it
			}
		}
	}
}

// Output follows a command's output from a cursor until the command ends, yielding each
// chunk as it comes; the last event carries Ended. A broken call (the network, a gateway
// restarting) is reattached from the last offsets, through any gateway, so every kept byte
// is yielded exactly once.
func (r *Run) Output(ctx context.Context, id string, from Cursor) iter.Seq2[Event, error] {
	return r.follow(ctx, id, from)
}

// reattachBackoff bounds the pause between reattachments.
const (
	reattachInitial = 100 * time.Millisecond
	reattachCeiling = 2 * time.Second
)

func (r *Run) follow(ctx context.Context, id string, from Cursor) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		cursor := from
		backoff := reattachInitial
		for {
			g, err := r.runGrant()
			if err != nil {
				yield(Event{}, err)
				return
			}
			cctx, cancel := context.WithCancel(ctx)
			st, err := r.env.c.api.WatchCommand(cctx, &executionv1.WatchCommandRequest{RunGrant: g, Environment: r.env.Ref(), CommandId: id, From: cursor.proto()})
			for err == nil {
				var ev *executionv1.CommandEvent
				if ev, err = st.Recv(); err != nil {
					break
				}
				e := eventOf(ev)
				if e.Output != nil {
					if e.Output.Offset-e.Output.Skipped != cursor.at(e.Output.Stream) {
						cancel()
						yield(Event{}, &Error{Code: codes.Internal, Message: "the output does not continue from the cursor"})
						return
					}
					cursor.Advance(*e.Output)
					backoff = reattachInitial
				}
				if !yield(e, nil) {
					cancel()
					return
				}
				if e.Ended != nil {
					cancel()
					return
				}
			}
			cancel()
			err = asError(err, "")
			if errors.Is(err, io.EOF) || !reattachable(err) || ctx.Err() != nil {
				if !errors.Is(err, io.EOF) {
					yield(Event{}, err)
				}
				return
			}
			t := time.NewTimer(time.Duration(mrand.Int64N(int64(backoff)) + 1))
			backoff = min(backoff*2, reattachCeiling)
			select {
			case <-ctx.Done():
				t.Stop()
				yield(Event{}, ctx.Err())
				return
			case <-t.C:
			}
		}
	}
}

// reattachable: following again from the cursor is harmless (a follow changes nothing), so
// any failure that did not come from execplane's decision — the connection, a gateway gone
// — or that execplane marks retryable is followed again.
func reattachable(err error) bool {
	var e *Error
	if !errors.As(err, &e) {
		return false
	}
	if e.Reason != "" {
		return e.Retryable || e.Reason == "OUTCOME_UNKNOWN"
	}
	return e.Code == codes.Unavailable || e.Code == codes.Unknown || e.Code == codes.Internal && e.RequestID == ""
}

// Wait follows a command until it ends, discarding its output, and returns how it ended.
func (r *Run) Wait(ctx context.Context, id string) (*CommandInfo, error) {
	info, _, err := r.Status(ctx, id, Cursor{}, 1)
	if err != nil {
		return nil, err
	}
	if !info.Running() {
		return info, nil
	}
	for e, err := range r.follow(ctx, id, info.End()) {
		if err != nil {
			return nil, err
		}
		if e.Ended != nil {
			return e.Ended, nil
		}
	}
	return nil, &Error{Code: codes.Internal, Message: "the command's stream ended without its end"}
}

// Status returns a command's record and up to maxBytes of its output from a cursor (0 means
// 1 MiB).
func (r *Run) Status(ctx context.Context, id string, from Cursor, maxBytes int) (*CommandInfo, []OutputChunk, error) {
	g, err := r.runGrant()
	if err != nil {
		return nil, nil, err
	}
	req := &executionv1.CommandStatusRequest{RunGrant: g, Environment: r.env.Ref(), CommandId: id, From: from.proto(), MaxOutputBytes: uint32(max(maxBytes, 0))}
	resp, err := call(ctx, r.env.c, idempotent, func(ctx context.Context, opts ...grpc.CallOption) (*executionv1.CommandStatusResponse, error) {
		return r.env.c.api.CommandStatus(ctx, req, opts...)
	})
	if err != nil {
		return nil, nil, err
	}
	var out []OutputChunk
	for _, c := range resp.GetOutput() {
		out = append(out, chunkOf(c))
	}
	return infoOf(resp.GetCommand()), out, nil
}

// Cancel stops a running command: SIGTERM to its process group, then after grace (0 means
// 10 s) SIGKILL to everything it started. It returns the command once recorded as ended;
// cancelling an ended command returns it as it is.
func (r *Run) Cancel(ctx context.Context, id string, grace time.Duration) (*CommandInfo, error) {
	g, err := r.runGrant()
	if err != nil {
		return nil, err
	}
	req := &executionv1.CancelCommandRequest{RunGrant: g, Environment: r.env.Ref(), CommandId: id}
	if grace > 0 {
		req.Grace = durationpb.New(grace)
	}
	resp, err := call(ctx, r.env.c, idempotent, func(ctx context.Context, opts ...grpc.CallOption) (*executionv1.CancelCommandResponse, error) {
		return r.env.c.api.CancelCommand(ctx, req, opts...)
	})
	if err != nil {
		return nil, err
	}
	return infoOf(resp.GetCommand()), nil
}

// Commands lists the environment's durable commands, newest first, at most limit (0 means
// 100); more reports that there were others.
func (r *Run) Commands(ctx context.Context, limit int) (list []*CommandInfo, more bool, err error) {
	g, err := r.runGrant()
	if err != nil {
		return nil, false, err
	}
	req := &executionv1.ListCommandsRequest{RunGrant: g, Environment: r.env.Ref(), MaxCommands: uint32(max(limit, 0))}
	resp, err := call(ctx, r.env.c, idempotent, func(ctx context.Context, opts ...grpc.CallOption) (*executionv1.ListCommandsResponse, error) {
		return r.env.c.api.ListCommands(ctx, req, opts...)
	})
	if err != nil {
		return nil, false, err
	}
	for _, c := range resp.GetCommands() {
		list = append(list, infoOf(c))
	}
	return list, resp.GetMore(), nil
}

func eventOf(ev *executionv1.CommandEvent) Event {
	switch x := ev.GetEvent().(type) {
	case *executionv1.CommandEvent_Started:
		return Event{Started: infoOf(x.Started)}
	case *executionv1.CommandEvent_Output:
		c := chunkOf(x.Output)
		return Event{Output: &c}
	case *executionv1.CommandEvent_Ended:
		return Event{Ended: infoOf(x.Ended)}
	}
	return Event{}
}

func chunkOf(c *executionv1.OutputChunk) OutputChunk {
	return OutputChunk{Stream: c.GetStream(), Offset: c.GetOffset(), Skipped: c.GetSkipped(), Data: c.GetData()}
}

func infoOf(c *executionv1.CommandInfo) *CommandInfo {
	info := &CommandInfo{ID: c.GetCommandId(), State: c.GetState(), RunID: c.GetRunId(), Epoch: c.GetEpoch(),
		StartedAt: c.GetStartedAt().AsTime(), Detached: c.GetDetached(), StdoutBytes: c.GetStdoutBytes(), StderrBytes: c.GetStderrBytes(),
		Message: c.GetMessage(), Program: c.GetProgram()}
	if c.GetResult() != nil {
		info.Result = resultOf(c.GetResult())
	}
	return info
}
