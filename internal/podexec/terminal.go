package podexec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	utilexec "k8s.io/client-go/util/exec"

	"github.com/execplane/execplane/internal/protocol"
	"github.com/execplane/execplane/pkg/apierror"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// ErrNoTerminals: the executor's helper does not know terminal mode (an older helper
// image): it refused the flag before it read anything, so nothing ran.
var ErrNoTerminals = fmt.Errorf("%w: the executor's helper has no terminals (an older helper image)", apierror.ErrUnimplemented)

// terminalOpener is the Exec's side of Pool.Terminal.
type terminalOpener interface {
	Terminal(ctx context.Context, pod PodRef, req *helperv1.Request) (*Terminal, error)
}

// Terminal opens a terminal at t — one exec, the helper in terminal mode, req (a
// TerminalOpen) sent — never over a session, whose requests are answered once.
func (p *Pool) Terminal(ctx context.Context, t Target, req *helperv1.Request) (*Terminal, error) {
	o, ok := p.exec.(terminalOpener)
	if !ok {
		return nil, ErrNoTerminals
	}
	return o.Terminal(ctx, t.Pod, req)
}

// Terminal is one terminal's exec stream to its helper. Its events are untrusted: Next
// admits only the terminal-mode frames, in order, within their bounds.
type Terminal struct {
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

// Send writes one frame of the caller's (a checked TerminalInput) to the helper; it
// fails once the terminal has ended.
func (c *Terminal) Send(m *helperv1.TerminalInput) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return protocol.WriteFrame(c.in, m, protocol.MaxTerminalFrameBytes)
}

// Next returns the terminal's next event — started, then output — or its Response, the
// last; heartbeats are skipped. A stream that breaks is ErrOutcomeUnknown (the command may
// have run), a frame out of place or over its bounds ErrProtocol (the stream is aborted), a
// helper without terminal mode ErrNoTerminals.
func (c *Terminal) Next() (*helperv1.TerminalEvent, *helperv1.Response, error) {
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
func (c *Terminal) final(resp *helperv1.Response) (*helperv1.TerminalEvent, *helperv1.Response, error) {
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

func (c *Terminal) violation(what string) error {
	c.done = true
	c.abort()
	return fmt.Errorf("%w: %s", ErrProtocol, what)
}

// broken explains a stream that ended or broke before the Response.
func (c *Terminal) broken(readErr error) error {
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
func (c *Terminal) Close() {
	c.close.Do(func() {
		c.abort() // first: it ends a write waiting for the transport
		c.in.Close()
	})
}
