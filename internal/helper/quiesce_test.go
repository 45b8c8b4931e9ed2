package helper_test

import (
	"bytes"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/execplane/execplane/internal/helper"
	"github.com/execplane/execplane/internal/helper/quiesce"
	"github.com/execplane/execplane/internal/protocol"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// serveOnce runs one request through Serve in this process and returns its response.
func serveOnce(t *testing.T, root string, req *helperv1.Request) *helperv1.Response {
	t.Helper()
	req.Version = helperv1.ProtocolVersion_PROTOCOL_VERSION_1
	if req.Limits == nil {
		req.Limits = limits()
	}
	var in, out bytes.Buffer
	if err := protocol.WriteFrame(&in, req, protocol.MaxRequestBytes); err != nil {
		t.Fatal(err)
	}
	// Stdin stays open until the response, as the gateway keeps it (its end cancels).
	done := make(chan struct{})
	err := helper.Serve(t.Context(), helper.Config{Root: root, HeartbeatInterval: time.Second}, io.MultiReader(&in, openUntil(done)), &out)
	close(done)
	if err != nil {
		t.Fatal(err)
	}
	for {
		var fr helperv1.Frame
		if err := protocol.ReadFrame(&out, &fr, protocol.MaxResponseBytes); err != nil {
			t.Fatalf("no response: %v", err)
		}
		if r := fr.GetResponse(); r != nil {
			return r
		}
	}
}

// While a hold is in force nothing starts a process — a command is refused UNAVAILABLE
// (retryable) — and file operations go on; after it, commands run again.
func TestCommandsWaitForAHold(t *testing.T) {
	saved := quiesce.MarkerPath
	t.Cleanup(func() { quiesce.MarkerPath = saved })
	quiesce.MarkerPath = filepath.Join(t.TempDir(), "hold")
	root, _ := workspace(t)
	cmd := &helperv1.Request{RequestId: "c", Operation: &helperv1.Request_Command{Command: shell("echo ran > ran")}}
	stat := &helperv1.Request{RequestId: "s", Operation: &helperv1.Request_File{File: statOp(".")}}
	if err := quiesce.Mark(quiesce.Marker{Deadline: time.Now().Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if r := serveOnce(t, root, cmd); r.GetError().GetCode() != helperv1.ErrorCode_ERROR_CODE_UNAVAILABLE {
		t.Fatalf("a command during a hold: %v", r)
	}
	if r := serveOnce(t, root, &helperv1.Request{RequestId: "r", Operation: &helperv1.Request_File{File: statOp("ran")}}); r.GetError().GetCode() != helperv1.ErrorCode_ERROR_CODE_NOT_FOUND {
		t.Fatalf("the refused command ran: %v", r)
	}
	if r := serveOnce(t, root, stat); r.GetError() != nil {
		t.Fatalf("a file operation during a hold: %v", r.GetError())
	}
	// A replay-only start begins nothing: it is answered during a hold (here: no record).
	replay := &helperv1.Request{RequestId: "p", Limits: durableLimits(), Operation: &helperv1.Request_Durable{Durable: &helperv1.Durable{
		Op: &helperv1.Durable_Start{Start: &helperv1.DurableStart{CommandId: "c1", RunId: "run-1", Epoch: 1, Detached: true,
			ReplayOnly: true, Command: shell("echo ran > ran")}}}}}
	if r := serveOnce(t, root, replay); r.GetError().GetCode() != helperv1.ErrorCode_ERROR_CODE_NOT_FOUND {
		t.Fatalf("a replay-only start during a hold: %v", r)
	}
	quiesce.Unmark()
	if r := serveOnce(t, root, cmd); r.GetError() != nil || r.GetCommand().GetExitCode() != 0 {
		t.Fatalf("a command after the hold: %v", r)
	}
}

// openUntil is a reader that blocks until done is closed, then ends.
type openUntil chan struct{}

func (o openUntil) Read([]byte) (int, error) {
	<-o
	return 0, io.EOF
}
