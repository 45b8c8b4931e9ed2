package helper

import (
	"context"
	"io"
	"os"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/execplane/execplane/internal/helper/fileops"
	"github.com/execplane/execplane/internal/helper/process"
	"github.com/execplane/execplane/internal/protocol"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// terminalQueue bounds the input and the resizes read ahead of a terminal that is not
// taking them: then the helper stops reading its stdin, and the gateway's writes wait.
const terminalQueue = 4

// ServeTerminal is terminal mode (--terminal): one command on a pseudo-terminal, its input
// and size changes read from stdin as TerminalInput frames, what the terminal shows written
// as TerminalEvent frames, then the Response with its result (proto/helper/v1). EOF on
// stdin, or a frame that is not a valid TerminalInput, ends the terminal: the command and
// everything it started are killed.
func ServeTerminal(_ context.Context, cfg Config, stdin io.Reader, stdout io.Writer) error {
	out := &frameWriter{w: stdout}
	var req helperv1.Request
	if err := protocol.ReadFrame(stdin, &req, protocol.MaxRequestBytes); err != nil {
		return out.error("", helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "bad request frame: "+err.Error())
	}
	id := req.GetRequestId()
	switch {
	case len(id) > protocol.MaxRequestIDBytes:
		return out.error("", helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "request_id too long")
	case req.GetVersion() != helperv1.ProtocolVersion_PROTOCOL_VERSION_1:
		return out.error(id, helperv1.ErrorCode_ERROR_CODE_UNSUPPORTED_VERSION, "unsupported protocol version")
	case req.GetTerminal() == nil:
		return out.error(id, helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "terminal mode runs a terminal and nothing else")
	}
	if err := held(&req); err != nil {
		return out.fail(id, err)
	}
	open := req.GetTerminal()
	lim := protocol.CommandLimitsOf(req.GetLimits())
	if err := lim.Check(); err != nil {
		return out.fail(id, err)
	}
	if err := protocol.ValidateTerminal(open, lim); err != nil {
		return out.fail(id, err)
	}
	rows, columns, _ := protocol.TerminalSize(open.GetSize())
	root, err := fileops.OpenRoot(cfg.Root)
	if err != nil {
		return out.fail(id, err)
	}
	err = enterWorkDir(root, open.GetCommand().GetWorkingDirectory())
	root.Close()
	if err != nil {
		return out.fail(id, err)
	}

	var once sync.Once
	cancel := make(chan struct{})
	stop := func() { once.Do(func() { close(cancel) }) }
	input := make(chan []byte, terminalQueue)
	resize := make(chan process.WindowSize, terminalQueue)
	done := make(chan struct{})
	defer close(done)
	go readTerminalInput(stdin, input, resize, done, stop)
	started := time.Now()
	go heartbeats(out, cfg.HeartbeatInterval, started, done, stop)
	res, err := process.Run(open.GetCommand(), process.Options{
		Limits:  lim,
		Environ: os.Environ(),
		Cancel:  cancel,
		Started: func(int) {
			ev := &helperv1.TerminalEvent{Event: &helperv1.TerminalEvent_Started{Started: timestamppb.Now()}}
			if out.frame(&helperv1.Frame{Frame: &helperv1.Frame_Terminal{Terminal: ev}}) != nil {
				stop()
			}
		},
		Terminal: &process.Terminal{
			Size: process.WindowSize{Rows: rows, Columns: columns}, Input: input, Resize: resize,
			Output: terminalOutput{out: out, stop: stop},
		},
	})
	if err != nil {
		return out.fail(id, err)
	}
	return out.response(&helperv1.Response{RequestId: id, Outcome: &helperv1.Response_Command{Command: res}})
}

// readTerminalInput reads the gateway's frames until stdin ends or breaks the protocol,
// then stops the terminal.
func readTerminalInput(stdin io.Reader, input chan<- []byte, resize chan<- process.WindowSize, done <-chan struct{}, stop func()) {
	defer stop()
	for {
		var in helperv1.TerminalInput
		if protocol.ReadFrame(stdin, &in, protocol.MaxTerminalFrameBytes) != nil || protocol.ValidateTerminalInput(&in) != nil {
			return
		}
		if data := in.GetData(); data != nil {
			select {
			case input <- data:
			case <-done:
				return
			}
			continue
		}
		rows, columns, _ := protocol.TerminalSize(in.GetResize())
		select {
		case resize <- process.WindowSize{Rows: rows, Columns: columns}:
		case <-done:
			return
		}
	}
}

// terminalOutput frames what the terminal shows; a write that fails (the call is gone)
// stops the terminal.
type terminalOutput struct {
	out  *frameWriter
	stop func()
}

func (t terminalOutput) Write(p []byte) (int, error) {
	for rest := p; len(rest) > 0; {
		n := min(len(rest), protocol.MaxTerminalOutputBytes)
		ev := &helperv1.TerminalEvent{Event: &helperv1.TerminalEvent_Output{Output: rest[:n]}}
		if err := t.out.frame(&helperv1.Frame{Frame: &helperv1.Frame_Terminal{Terminal: ev}}); err != nil {
			t.stop()
			return len(p) - len(rest), err
		}
		rest = rest[n:]
	}
	return len(p), nil
}
