package gateway

import (
	"bytes"
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/execplane/execplane/internal/protocol"
	"github.com/execplane/execplane/pkg/apierror"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// terminalInput: what the caller may send after the start, as the helper takes it.
func TestTerminalInput(t *testing.T) {
	size := func(rows, columns uint32) *executionv1.TerminalRequest {
		return &executionv1.TerminalRequest{Frame: &executionv1.TerminalRequest_Resize{Resize: &executionv1.TerminalSize{Rows: rows, Columns: columns}}}
	}
	data := func(b []byte) *executionv1.TerminalRequest {
		return &executionv1.TerminalRequest{Frame: &executionv1.TerminalRequest_Input{Input: b}}
	}
	for _, c := range []struct {
		name string
		m    *executionv1.TerminalRequest
		ok   bool
	}{
		{"a start after the start", &executionv1.TerminalRequest{Frame: &executionv1.TerminalRequest_Start{Start: &executionv1.TerminalStart{}}}, false},
		{"nothing", &executionv1.TerminalRequest{}, false},
		{"empty input", data([]byte{}), false},
		{"nil input", data(nil), false},
		{"65537 bytes", data(bytes.Repeat([]byte("y"), protocol.MaxTerminalInputBytes+1)), false},
		{"65536 bytes", data(bytes.Repeat([]byte("y"), protocol.MaxTerminalInputBytes)), true},
		{"one byte", data([]byte{3}), true},
		{"a resize to 0x0", size(0, 0), false},
		{"a resize without a size", &executionv1.TerminalRequest{Frame: &executionv1.TerminalRequest_Resize{}}, false},
		{"a resize to 0x80", size(0, 80), false},
		{"a resize to 1001x80", size(1001, 80), false},
		{"a resize to 1000x1000", size(1000, 1000), true},
		{"a resize to 1x1", size(1, 1), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			in, err := terminalInput(c.m)
			if !c.ok {
				if !errors.Is(err, apierror.ErrInvalidArgument) || in != nil {
					t.Fatalf("want INVALID_ARGUMENT, got %v (%v)", err, in)
				}
				return
			}
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			// What is forwarded is what was sent, and the helper takes it.
			if err := protocol.ValidateTerminalInput(in); err != nil {
				t.Fatalf("the helper would refuse %v: %v", in, err)
			}
			switch x := c.m.GetFrame().(type) {
			case *executionv1.TerminalRequest_Input:
				if !bytes.Equal(in.GetData(), x.Input) || in.GetResize() != nil {
					t.Fatalf("forwarded %v for input of %d bytes", in, len(x.Input))
				}
			case *executionv1.TerminalRequest_Resize:
				if !proto.Equal(in.GetResize(), x.Resize) || in.GetData() != nil {
					t.Fatalf("forwarded %v for a resize to %v", in, x.Resize)
				}
			}
			var b bytes.Buffer
			if err := protocol.WriteFrame(&b, in, protocol.MaxTerminalFrameBytes); err != nil {
				t.Fatalf("the accepted input does not fit the frame cap: %v", err)
			}
		})
	}
}
