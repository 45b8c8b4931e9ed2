package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	utilexec "k8s.io/client-go/util/exec"

	"github.com/execplane/execplane/internal/logging"
	"github.com/execplane/execplane/internal/protocol"
	"github.com/execplane/execplane/pkg/apierror"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// ErrNoTerminals: the executor's helper does not know terminal mode (an older helper
// image): it refused the flag before it read anything, so nothing ran.
var ErrNoTerminals = fmt.Errorf("%w: the executor's helper has no terminals (an older helper image)", apierror.ErrUnimplemented)

// TerminalExecutor is an Executor that also opens terminals: one exec each, the helper in
// terminal mode, req (a TerminalOpen) sent.
type TerminalExecutor interface {
	Terminal(ctx context.Context, t Target, req *helperv1.Request) (*TerminalConn, error)
}

// terminalOpener is the PodExecutor's side of TerminalExecutor.
type terminalOpener interface {
	Terminal(ctx context.Context, pod PodRef, req *helperv1.Request) (*TerminalConn, error)
}

// Terminal opens a terminal at t (see TerminalExecutor): never over a session, whose
// requests are answered once, but on an exec of its own.
func (p *Sessions) Terminal(ctx context.Context, t Target, req *helperv1.Request) (*TerminalConn, error) {
	o, ok := p.exec.(terminalOpener)
	if !ok {
		return nil, ErrNoTerminals
	}
	return o.Terminal(ctx, t.Pod, req)
}

// Terminal implements ExecutionProviderService: a command on a pseudo-terminal, the caller's
// input and window size carried in, what the terminal shows carried out, then its result.
// It is admitted like StartCommand, counts as one of the environment's calls while it
// lives, and ends with its run claim (the exec stream closes and the helper kills what it
// runs), its timeout, or the call.
func (h *Handler) Terminal(stream grpc.BidiStreamingServer[executionv1.TerminalRequest, executionv1.TerminalResponse]) error {
	ctx := stream.Context()
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	start := first.GetStart()
	if start == nil {
		return fmt.Errorf("%w: the first message of a terminal is its start", apierror.ErrInvalidArgument)
	}
	open := &helperv1.TerminalOpen{Command: start.GetCommand(), Size: start.GetSize()}
	if open.Command == nil {
		return fmt.Errorf("%w: command: required", apierror.ErrInvalidArgument)
	}
	if err := protocol.ValidateWorkingDirectory(open.Command.GetWorkingDirectory()); err != nil {
		return helperError(err)
	}
	a, err := h.admit(ctx, start.GetRunGrant(), start.GetEnvironment())
	if err != nil {
		return err
	}
	lim := protocol.CommandLimitsOf(a.limits)
	if err := protocol.ValidateTerminal(open, lim); err != nil {
		return helperError(err)
	}
	_, timeout, _ := protocol.ValidateCommand(open.Command, lim)
	te, ok := h.b.Executor.(TerminalExecutor)
	if !ok {
		return ErrNoTerminals
	}
	release, err := h.calls.acquire(a.env.UID)
	if err != nil {
		return err
	}
	defer release()
	ctx, cancel := context.WithTimeout(ctx, timeout+commandSlack)
	defer cancel()
	ctx, stop := h.fenced(ctx, a.env, a.claims)
	defer stop()
	req := &helperv1.Request{
		Version: helperv1.ProtocolVersion_PROTOCOL_VERSION_1, RequestId: RequestID(ctx),
		Limits: a.limits, Operation: &helperv1.Request_Terminal{Terminal: open},
	}
	conn, err := te.Terminal(ctx, TargetOf(a.env), req)
	if err != nil {
		return h.terminalError(ctx, a, req.RequestId, err)
	}
	defer conn.Close()
	// The caller's side: input and resizes, checked, then forwarded in order. Its end (the
	// caller closed its side) ends the input only; a bad message ends the terminal.
	refused := make(chan error, 1)
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				return
			}
			in, err := terminalInput(m)
			if err != nil {
				refused <- err
				conn.Close()
				return
			}
			if conn.send(in) != nil {
				return // the terminal ended: Next says how
			}
		}
	}()
	for {
		ev, resp, err := conn.Next()
		if err != nil {
			select {
			case bad := <-refused:
				return bad
			default:
			}
			return h.terminalError(ctx, a, req.RequestId, err)
		}
		if resp != nil {
			if e := resp.GetError(); e != nil {
				h.cfg.Metrics.executor(outcomeRefused)
				return helperError(&protocol.Error{Code: e.GetCode(), Msg: e.GetMessage()})
			}
			h.cfg.Metrics.executor(outcomeOK)
			return stream.Send(&executionv1.TerminalResponse{Event: &executionv1.TerminalResponse_Result{Result: resp.GetCommand()}})
		}
		var out *executionv1.TerminalResponse
		if s := ev.GetStarted(); s != nil {
			out = &executionv1.TerminalResponse{Event: &executionv1.TerminalResponse_Started{Started: s}}
		} else {
			out = &executionv1.TerminalResponse{Event: &executionv1.TerminalResponse_Output{Output: ev.GetOutput()}}
		}
		if err := stream.Send(out); err != nil {
			return err
		}
	}
}

// terminalError reports why a terminal ended without a result, as run does for a call.
func (h *Handler) terminalError(ctx context.Context, a *admitted, id string, err error) error {
	switch {
	case errors.Is(context.Cause(ctx), errAuthorityLost):
		h.cfg.Metrics.executor(outcomeUnknown)
		return errAuthorityLost
	case errors.Is(err, ErrProtocol):
		h.cfg.Metrics.executor(outcomeProtocol)
		h.log.Error("executor protocol violation", logging.KeyRequestID, id, logging.KeyEnvironment, a.env.Name, logging.KeyPod, a.env.Status.Pod.Name, logging.KeyError, err)
	case errors.Is(err, ErrOutcomeUnknown):
		h.cfg.Metrics.executor(outcomeUnknown)
		if ctx.Err() == nil {
			h.log.Warn("executor stream broke", logging.KeyRequestID, id, logging.KeyEnvironment, a.env.Name, logging.KeyError, err)
		}
	default:
		h.cfg.Metrics.executor(outcomeError)
	}
	if ctx.Err() != nil && errors.Is(err, ErrOutcomeUnknown) {
		// The call ended (the caller went away, or the timeout): the helper killed the
		// command, as the call's end asks.
		return ctx.Err()
	}
	return err
}

// TerminalConn is one terminal's exec stream to its helper. Its events are untrusted: Next
// admits only the terminal-mode frames, in order, within their bounds.
type TerminalConn struct {
	mu    sync.Mutex     // serialises writes
	in    io.WriteCloser // safe to close beside a write
	out   io.Reader
	abort func()
	// ended delivers the exec stream's end once.
	ended   <-chan error
	started bool
	done    bool
	close   sync.Once
}

// terminalInput is a message of the caller's past its start, checked, as the helper takes
// it.
func terminalInput(m *executionv1.TerminalRequest) (*helperv1.TerminalInput, error) {
	var in *helperv1.TerminalInput
	switch x := m.GetFrame().(type) {
	case *executionv1.TerminalRequest_Input:
		in = &helperv1.TerminalInput{Input: &helperv1.TerminalInput_Data{Data: x.Input}}
	case *executionv1.TerminalRequest_Resize:
		in = &helperv1.TerminalInput{Input: &helperv1.TerminalInput_Resize{Resize: x.Resize}}
	default:
		return nil, fmt.Errorf("%w: after its start, a terminal takes input and resizes", apierror.ErrInvalidArgument)
	}
	if err := protocol.ValidateTerminalInput(in); err != nil {
		return nil, helperError(err)
	}
	return in, nil
}

func (c *TerminalConn) send(m proto.Message) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return protocol.WriteFrame(c.in, m, protocol.MaxTerminalFrameBytes)
}

// Next returns the terminal's next event — started, then output — or its Response, the
// last; heartbeats are skipped. A stream that breaks is ErrOutcomeUnknown (the command may
// have run), a frame out of place or over its bounds ErrProtocol (the stream is aborted), a
// helper without terminal mode ErrNoTerminals.
func (c *TerminalConn) Next() (*helperv1.TerminalEvent, *helperv1.Response, error) {
	if c.done {
		return nil, nil, io.EOF
	}
	for {
		var f helperv1.Frame
		if err := protocol.ReadFrame(c.out, &f, protocol.MaxTerminalFrameBytes); err != nil {
			return nil, nil, c.broken(err)
		}
		switch x := f.GetFrame().(type) {
		case *helperv1.Frame_Heartbeat:
			continue
		case *helperv1.Frame_Terminal:
			switch ev := x.Terminal.GetEvent().(type) {
			case *helperv1.TerminalEvent_Started:
				if c.started {
					return nil, nil, c.violation("a second start")
				}
				c.started = true
			case *helperv1.TerminalEvent_Output:
				if !c.started || len(ev.Output) == 0 || len(ev.Output) > protocol.MaxTerminalOutputBytes {
					return nil, nil, c.violation("output before the start, empty, or over its bound")
				}
			default:
				return nil, nil, c.violation("an empty terminal event")
			}
			return x.Terminal, nil, nil
		case *helperv1.Frame_Response:
			return c.final(x.Response)
		default:
			return nil, nil, c.violation("a frame of another mode")
		}
	}
}

// final checks the Response and that the stream ends after it.
func (c *TerminalConn) final(resp *helperv1.Response) (*helperv1.TerminalEvent, *helperv1.Response, error) {
	c.done = true
	switch {
	case resp.GetError() != nil:
	case resp.GetCommand() == nil:
		return nil, nil, c.violation("a response without a command result")
	case !c.started && resp.GetCommand().GetState() != executionv1.CommandState_COMMAND_STATE_START_FAILED:
		return nil, nil, c.violation("a result before the start (only a command that could not start has one)")
	case len(resp.GetCommand().GetStdout().GetHead())+len(resp.GetCommand().GetStdout().GetTail())+
		len(resp.GetCommand().GetStderr().GetHead())+len(resp.GetCommand().GetStderr().GetTail()) > 0:
		return nil, nil, c.violation("a terminal's result with output in it")
	}
	c.in.Close()
	timer := time.AfterFunc(terminalExitGrace, c.abort)
	defer timer.Stop()
	var extra [1]byte
	if n, _ := io.ReadFull(c.out, extra[:]); n > 0 {
		c.abort()
		return nil, nil, fmt.Errorf("%w: bytes after the response", ErrProtocol)
	}
	var code utilexec.CodeExitError
	if err := <-c.ended; err != nil {
		if errors.As(err, &code) {
			return nil, nil, fmt.Errorf("%w: the helper exited with %d after its response", ErrProtocol, code.Code)
		}
		return nil, nil, fmt.Errorf("%w: the stream did not end after the response: %v", ErrProtocol, err)
	}
	return nil, resp, nil
}

// terminalExitGrace bounds how long the helper may take to exit after its response.
const terminalExitGrace = 5 * time.Second

func (c *TerminalConn) violation(what string) error {
	c.done = true
	c.abort()
	return fmt.Errorf("%w: %s", ErrProtocol, what)
}

// broken explains a stream that ended or broke before the Response.
func (c *TerminalConn) broken(readErr error) error {
	c.done = true
	if !errors.Is(readErr, io.EOF) {
		c.abort()
		return fmt.Errorf("%w: %v", ErrProtocol, readErr)
	}
	streamErr := <-c.ended
	var code utilexec.CodeExitError
	switch {
	case !c.started && errors.As(streamErr, &code) && code.Code == usageExit:
		return ErrNoTerminals
	case errors.As(streamErr, &code) && killedBySignal(code.Code):
		return fmt.Errorf("%w: the helper died by signal %d before it answered (the OOM killer, or the workload)", ErrOutcomeUnknown, code.Code-signalExitBase)
	case streamErr != nil:
		return fmt.Errorf("%w: %v", ErrOutcomeUnknown, streamErr)
	default:
		return fmt.Errorf("%w: the helper ended without an answer", ErrOutcomeUnknown)
	}
}

// Close ends the terminal: its stdin closes (the helper kills what it runs) and the stream
// is torn down.
func (c *TerminalConn) Close() {
	c.close.Do(func() {
		c.abort() // first: it ends a write waiting for the transport
		c.in.Close()
	})
}
