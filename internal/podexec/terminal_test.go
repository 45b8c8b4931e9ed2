package podexec

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	utilexec "k8s.io/client-go/util/exec"

	"github.com/execplane/execplane/internal/protocol"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// recordingStdin is the helper's stdin as a Terminal sees it: it records what is
// written and whether it was closed.
type recordingStdin struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	closed int
}

func (r *recordingStdin) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed > 0 {
		return 0, io.ErrClosedPipe
	}
	return r.buf.Write(p)
}

func (r *recordingStdin) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed++
	return nil
}

// Frames a helper might send.
func hbFrame() *helperv1.Frame {
	return &helperv1.Frame{Frame: &helperv1.Frame_Heartbeat{Heartbeat: &helperv1.Heartbeat{ElapsedMillis: 5}}}
}

func startedFrame() *helperv1.Frame {
	return &helperv1.Frame{Frame: &helperv1.Frame_Terminal{Terminal: &helperv1.TerminalEvent{Event: &helperv1.TerminalEvent_Started{Started: timestamppb.Now()}}}}
}

func outputFrame(b []byte) *helperv1.Frame {
	return &helperv1.Frame{Frame: &helperv1.Frame_Terminal{Terminal: &helperv1.TerminalEvent{Event: &helperv1.TerminalEvent_Output{Output: b}}}}
}

func resultFrame(res *executionv1.CommandResult) *helperv1.Frame {
	return &helperv1.Frame{Frame: &helperv1.Frame_Response{Response: &helperv1.Response{RequestId: "r", Outcome: &helperv1.Response_Command{Command: res}}}}
}

func terminalResult(shown uint64) *executionv1.CommandResult {
	return &executionv1.CommandResult{State: executionv1.CommandState_COMMAND_STATE_SUCCEEDED, Stdout: &executionv1.CapturedOutput{TotalBytes: shown}, Stderr: &executionv1.CapturedOutput{}}
}

func errorFrame(code helperv1.ErrorCode) *helperv1.Frame {
	return &helperv1.Frame{Frame: &helperv1.Frame_Response{Response: &helperv1.Response{RequestId: "r", Outcome: &helperv1.Response_Error{Error: &helperv1.Error{Code: code, Message: "refused"}}}}}
}

// stream encodes frames the way the helper writes them (its own, larger bound); a []byte
// item is appended raw.
func stream(t *testing.T, items ...any) []byte {
	t.Helper()
	var b bytes.Buffer
	for _, it := range items {
		switch x := it.(type) {
		case proto.Message:
			if err := protocol.WriteFrame(&b, x, protocol.MaxResponseBytes); err != nil {
				t.Fatal(err)
			}
		case []byte:
			b.Write(x)
		default:
			t.Fatalf("stream item %T", it)
		}
	}
	return b.Bytes()
}

func exitCode(code int) error {
	return utilexec.CodeExitError{Err: errors.New("command terminated with non-zero exit code"), Code: code}
}

// Terminal.Next against what a helper (or something posing as one) sends.
func TestTerminalNext(t *testing.T) {
	const (
		dontCare = iota
		aborted
		notAborted
	)
	withHead := terminalResult(3)
	withHead.Stdout.Head = []byte("abc")
	startFailed := &executionv1.CommandResult{State: executionv1.CommandState_COMMAND_STATE_START_FAILED, ExitCode: -1,
		Message: "cannot start: executable file not found in $PATH", Stdout: &executionv1.CapturedOutput{}, Stderr: &executionv1.CapturedOutput{}, Receipt: "sha256:00"}
	withStderrTail := terminalResult(3)
	withStderrTail.Stderr.Tail = []byte("abc")
	// A frame whose length says 100 bytes, then 3.
	truncated := binary.BigEndian.AppendUint32(nil, 100)
	truncated = append(truncated, 1, 2, 3)
	for _, c := range []struct {
		name  string
		items []any
		ended error
		// The kinds Next returns first ("started", "output", "response", "error"), then
		// its error: want (nil: io.EOF, after the response).
		kinds  []string
		want   error
		notErr error
		abort  int
		// inClosed: the conn closed the helper's stdin (after a valid response).
		inClosed bool
	}{
		{name: "well-formed", items: []any{hbFrame(), startedFrame(), hbFrame(), outputFrame([]byte("hello")), hbFrame(), resultFrame(terminalResult(5))},
			kinds: []string{"started", "output", "response"}, abort: notAborted, inClosed: true},
		{name: "output of the largest size", items: []any{startedFrame(), outputFrame(bytes.Repeat([]byte("x"), protocol.MaxTerminalOutputBytes)), resultFrame(terminalResult(protocol.MaxTerminalOutputBytes))},
			kinds: []string{"started", "output", "response"}, abort: notAborted, inClosed: true},
		{name: "a refusal before the start", items: []any{errorFrame(helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT)},
			kinds: []string{"error"}, abort: notAborted, inClosed: true},

		{name: "output before the start", items: []any{outputFrame([]byte("x")), startedFrame()},
			want: ErrProtocol, abort: aborted},
		{name: "a second start", items: []any{startedFrame(), outputFrame([]byte("x")), startedFrame()},
			kinds: []string{"started", "output"}, want: ErrProtocol, abort: aborted},
		{name: "empty output", items: []any{startedFrame(), outputFrame([]byte{})},
			kinds: []string{"started"}, want: ErrProtocol, abort: aborted},
		{name: "output over its bound", items: []any{startedFrame(), outputFrame(bytes.Repeat([]byte("x"), protocol.MaxTerminalOutputBytes+1))},
			kinds: []string{"started"}, want: ErrProtocol, abort: aborted},
		{name: "a frame over the frame cap", items: []any{startedFrame(), outputFrame(bytes.Repeat([]byte("x"), protocol.MaxTerminalFrameBytes))},
			kinds: []string{"started"}, want: ErrProtocol, abort: aborted},
		{name: "an empty terminal event", items: []any{startedFrame(), &helperv1.Frame{Frame: &helperv1.Frame_Terminal{Terminal: &helperv1.TerminalEvent{}}}},
			kinds: []string{"started"}, want: ErrProtocol, abort: aborted},
		{name: "a frame of another mode", items: []any{startedFrame(), &helperv1.Frame{Frame: &helperv1.Frame_Ready{Ready: &helperv1.SessionReady{}}}},
			kinds: []string{"started"}, want: ErrProtocol, abort: aborted},
		{name: "a frame without a kind", items: []any{startedFrame(), &helperv1.Frame{}},
			kinds: []string{"started"}, want: ErrProtocol, abort: aborted},
		{name: "a truncated frame", items: []any{startedFrame(), truncated},
			kinds: []string{"started"}, want: ErrProtocol, abort: aborted},
		{name: "a payload that is not a frame", items: []any{startedFrame(), []byte{0, 0, 0, 2, 0xff, 0xff}},
			kinds: []string{"started"}, want: ErrProtocol, abort: aborted},
		{name: "a response without a result or an error", items: []any{startedFrame(), &helperv1.Frame{Frame: &helperv1.Frame_Response{Response: &helperv1.Response{RequestId: "r"}}}},
			kinds: []string{"started"}, want: ErrProtocol, abort: aborted},
		{name: "a result before the start", items: []any{resultFrame(terminalResult(0))},
			want: ErrProtocol, abort: aborted},
		// A command that cannot start (no such program) is answered with a START_FAILED
		// result and no started frame (process.Run's startFailed).
		{name: "a start failure", items: []any{hbFrame(), resultFrame(startFailed)},
			kinds: []string{"response"}, abort: notAborted, inClosed: true},
		{name: "a result with stdout head", items: []any{startedFrame(), resultFrame(withHead)},
			kinds: []string{"started"}, want: ErrProtocol, abort: aborted},
		{name: "a result with stderr tail", items: []any{startedFrame(), resultFrame(withStderrTail)},
			kinds: []string{"started"}, want: ErrProtocol, abort: aborted},
		{name: "bytes after the response", items: []any{startedFrame(), resultFrame(terminalResult(0)), []byte{0}},
			kinds: []string{"started"}, want: ErrProtocol, abort: aborted},
		{name: "a frame after the response", items: []any{startedFrame(), resultFrame(terminalResult(0)), hbFrame()},
			kinds: []string{"started"}, want: ErrProtocol, abort: aborted},
		{name: "an exit status after the response", items: []any{startedFrame(), resultFrame(terminalResult(0))}, ended: exitCode(1),
			kinds: []string{"started"}, want: ErrProtocol},

		{name: "no terminal mode", ended: exitCode(usageExit),
			want: ErrNoTerminals, notErr: ErrOutcomeUnknown, abort: notAborted},
		{name: "exit 2 after the start", items: []any{startedFrame()}, ended: exitCode(usageExit),
			kinds: []string{"started"}, want: ErrOutcomeUnknown, notErr: ErrNoTerminals, abort: notAborted},
		{name: "killed after the start", items: []any{startedFrame(), outputFrame([]byte("x"))}, ended: exitCode(137),
			kinds: []string{"started", "output"}, want: ErrOutcomeUnknown, notErr: ErrProtocol, abort: notAborted},
		{name: "a clean end after the start", items: []any{startedFrame()},
			kinds: []string{"started"}, want: ErrOutcomeUnknown, notErr: ErrProtocol, abort: notAborted},
		{name: "a clean end before anything", want: ErrOutcomeUnknown, notErr: ErrNoTerminals, abort: notAborted},
		{name: "a broken stream", items: []any{startedFrame()}, ended: errors.New("connection reset"),
			kinds: []string{"started"}, want: ErrOutcomeUnknown, notErr: ErrProtocol, abort: notAborted},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := &recordingStdin{}
			aborts := 0
			ended := make(chan error, 1)
			ended <- c.ended
			conn := &Terminal{in: in, out: bytes.NewReader(stream(t, c.items...)), abort: func() { aborts++ }, ended: ended}
			for i, kind := range c.kinds {
				ev, resp, err := conn.Next()
				if err != nil {
					t.Fatalf("Next %d: want %s, got %v", i, kind, err)
				}
				var got string
				switch {
				case resp != nil && resp.GetError() != nil:
					got = "error"
				case resp != nil && resp.GetCommand() != nil:
					got = "response"
				case ev.GetStarted() != nil:
					got = "started"
				case ev.GetOutput() != nil:
					got = "output"
				}
				if got != kind || (ev != nil) == (resp != nil) {
					t.Fatalf("Next %d: want %s, got event %v response %v", i, kind, ev, resp)
				}
			}
			want := c.want
			if want == nil {
				want = io.EOF
			}
			ev, resp, err := conn.Next()
			if !errors.Is(err, want) || ev != nil || resp != nil {
				t.Fatalf("want %v, got %v (event %v, response %v)", want, err, ev, resp)
			}
			if c.notErr != nil && errors.Is(err, c.notErr) {
				t.Errorf("%v is also %v", err, c.notErr)
			}
			if _, _, err := conn.Next(); !errors.Is(err, io.EOF) {
				t.Errorf("Next after the end: want io.EOF, got %v", err)
			}
			switch {
			case c.abort == aborted && aborts == 0:
				t.Error("the stream was not aborted")
			case c.abort == notAborted && aborts != 0:
				t.Errorf("the stream was aborted %d times", aborts)
			}
			if c.inClosed && in.closed == 0 {
				t.Error("the helper's stdin was not closed after its response")
			}
		})
	}
}

// Close aborts the stream and closes the helper's stdin, once.
func TestTerminalClose(t *testing.T) {
	in := &recordingStdin{}
	aborts := 0
	conn := &Terminal{in: in, out: strings.NewReader(""), abort: func() { aborts++ }, ended: make(chan error, 1)}
	conn.Close()
	conn.Close()
	if aborts != 1 || in.closed != 1 {
		t.Fatalf("after two Closes: %d aborts, stdin closed %d times", aborts, in.closed)
	}
	if err := conn.Send(&helperv1.TerminalInput{Input: &helperv1.TerminalInput_Data{Data: []byte("x")}}); err == nil {
		t.Fatal("a send after Close succeeded")
	}
}
