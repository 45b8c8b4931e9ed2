package client

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// maxTerminalInput is the most input one message carries (the gateway's bound).
const maxTerminalInput = 64 << 10

// TerminalOptions configure Run.Terminal.
type TerminalOptions struct {
	// Rows and Columns are the window's size at the start: 1..1000 each, 24×80 when both
	// are 0.
	Rows, Columns int
}

// Terminal is a command running on a pseudo-terminal in the workspace (Run.Terminal): what
// is written to it is typed, what is read from it is what the terminal shows (its echo of
// the input included). It lives until the command ends, its timeout, its run claim or
// Close. Write, Resize and CloseInput may be called concurrently with Read and Wait.
type Terminal struct {
	st     grpc.BidiStreamingClient[executionv1.TerminalRequest, executionv1.TerminalResponse]
	cancel context.CancelFunc
	// StartedAt is when the command started.
	StartedAt time.Time

	sendMu sync.Mutex
	recvMu sync.Mutex
	rest   []byte // output received and not read yet
	result *CommandResult
	err    error // why the terminal ended without a result, once known
}

// Terminal runs a command on a pseudo-terminal and returns once it runs (or could not: a
// START_FAILED result comes back as the terminal's result, from Wait). c.Stdin must be
// empty — the input is what is written — and TERM is the caller's to set in c.Env. Ending
// ctx or calling Close ends the call, and the helper kills everything the command started.
func (r *Run) Terminal(ctx context.Context, c Command, opts TerminalOptions) (*Terminal, error) {
	g, err := r.runGrant()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	st, err := r.env.c.api.Terminal(ctx)
	if err != nil {
		cancel()
		return nil, asError(err, "")
	}
	start := &executionv1.TerminalStart{RunGrant: g, Environment: r.env.Ref(), Command: specOf(c)}
	if opts.Rows != 0 || opts.Columns != 0 {
		start.Size = &executionv1.TerminalSize{Rows: uint32(opts.Rows), Columns: uint32(opts.Columns)}
	}
	t := &Terminal{st: st, cancel: cancel}
	if err := st.Send(&executionv1.TerminalRequest{Frame: &executionv1.TerminalRequest_Start{Start: start}}); err != nil {
		t.Close()
		return nil, t.fail(err)
	}
	m, err := st.Recv()
	switch {
	case err != nil:
		t.Close()
		return nil, t.fail(err)
	case m.GetStarted() != nil:
		t.StartedAt = m.GetStarted().AsTime()
		return t, nil
	case m.GetResult() != nil:
		// It could not start: the result says why.
		t.result = resultOf(m.GetResult())
		t.err = io.EOF
		return t, nil
	default:
		t.Close()
		return nil, &Error{Code: codes.Internal, Message: "the terminal's first message is not its start"}
	}
}

// fail records why the terminal ended without a result, as an API error.
func (t *Terminal) fail(err error) error {
	if errors.Is(err, io.EOF) {
		err = &Error{Code: codes.Internal, Message: "the terminal's call ended without a result"}
	}
	t.err = asError(err, "")
	return t.err
}

// Write types p into the terminal, in pieces the gateway takes.
func (t *Terminal) Write(p []byte) (int, error) {
	t.sendMu.Lock()
	defer t.sendMu.Unlock()
	n := 0
	for n < len(p) {
		piece := p[n:min(len(p), n+maxTerminalInput)]
		if err := t.st.Send(&executionv1.TerminalRequest{Frame: &executionv1.TerminalRequest_Input{Input: piece}}); err != nil {
			return n, t.sendError(err)
		}
		n += len(piece)
	}
	return n, nil
}

// Resize tells the terminal its window's new size (1..1000 each): the command's foreground
// process group gets SIGWINCH.
func (t *Terminal) Resize(rows, columns int) error {
	t.sendMu.Lock()
	defer t.sendMu.Unlock()
	err := t.st.Send(&executionv1.TerminalRequest{Frame: &executionv1.TerminalRequest_Resize{
		Resize: &executionv1.TerminalSize{Rows: uint32(rows), Columns: uint32(columns)}}})
	return t.sendError(err)
}

// sendError: a send fails with io.EOF once the call has ended; why is Read's or Wait's.
func (t *Terminal) sendError(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrClosedPipe
	}
	return asError(err, "")
}

// CloseInput ends the input (nothing more will be typed); the command goes on.
func (t *Terminal) CloseInput() error {
	t.sendMu.Lock()
	defer t.sendMu.Unlock()
	return t.st.CloseSend()
}

// Read reads what the terminal shows. It returns io.EOF once the command has ended (Wait
// then returns how), or the error that ended the terminal without a result.
func (t *Terminal) Read(p []byte) (int, error) {
	t.recvMu.Lock()
	defer t.recvMu.Unlock()
	for len(t.rest) == 0 {
		if err := t.next(); err != nil {
			return 0, err
		}
	}
	n := copy(p, t.rest)
	t.rest = t.rest[n:]
	return n, nil
}

// next receives one message. The caller holds recvMu.
func (t *Terminal) next() error {
	if t.err != nil {
		return t.err
	}
	m, err := t.st.Recv()
	if err != nil {
		return t.fail(err)
	}
	switch {
	case m.GetResult() != nil:
		t.result = resultOf(m.GetResult())
		t.err = io.EOF
		t.cancel()
		return io.EOF
	case m.GetOutput() != nil:
		t.rest = m.GetOutput()
		return nil
	default:
		return t.fail(&Error{Code: codes.Internal, Message: "a terminal message out of place"})
	}
}

// Wait returns how the command ended, once it has: output not read yet is discarded. Its
// result carries no output — Read had it — but counts it (Stdout.Total).
func (t *Terminal) Wait() (*CommandResult, error) {
	t.recvMu.Lock()
	defer t.recvMu.Unlock()
	for {
		if t.result != nil {
			return t.result, nil
		}
		t.rest = nil
		if err := t.next(); err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
	}
}

// Close ends the terminal's call: the helper kills everything the command started. It is
// safe to call at any time, more than once.
func (t *Terminal) Close() error {
	t.cancel()
	return nil
}
