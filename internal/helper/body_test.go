package helper_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/execplane/execplane/internal/helper"
	"github.com/execplane/execplane/internal/protocol"
	"github.com/execplane/execplane/internal/session"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// inProcess is a session served in this process by helper.ServeSession, driven frame by
// frame as a gateway — a hostile one, where the test says so — would.
type inProcess struct {
	in     *io.PipeWriter
	frames chan *helperv1.Frame // what the helper wrote, heartbeats left out; closed at its end
	served chan error           // ServeSession's result
}

// serveInProcess starts a session on root and handshakes with chunks of the minimum size.
func serveInProcess(t *testing.T, root string, maxInFlight int) *inProcess {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	h := &inProcess{in: inW, frames: make(chan *helperv1.Frame, 256), served: make(chan error, 1)}
	go func() {
		err := helper.ServeSession(context.Background(), helper.Config{Root: root}, inR, outW)
		inR.Close() // a gateway writing on gets an error, not a hang
		outW.Close()
		h.served <- err
	}()
	go func() {
		defer close(h.frames)
		for {
			var f helperv1.Frame
			err := protocol.ReadFrame(outR, &f, protocol.MaxResponseBytes)
			if errors.Is(err, io.EOF) {
				return
			}
			if err != nil {
				t.Errorf("the helper wrote an undecodable frame: %v", err)
				return
			}
			if f.GetHeartbeat() == nil {
				h.frames <- &f
			}
		}
	}()
	t.Cleanup(func() {
		inW.Close()
		for range h.frames { // drained until the helper's end
		}
		select {
		case <-h.served:
		case <-time.After(10 * time.Second):
			t.Error("the session did not end after its stdin did")
		}
	})
	h.send(t, protocol.NewHello(maxInFlight, protocol.MinChunkBytes, time.Minute))
	if f := h.next(t); f.GetReady() == nil || !f.GetReady().GetBodies() {
		t.Fatalf("want a ready offering bodies, got %v", f)
	}
	return h
}

func (h *inProcess) send(t *testing.T, f *helperv1.SessionFrame) {
	t.Helper()
	if err := protocol.WriteFrame(h.in, f, protocol.MaxRequestBytes); err != nil {
		t.Fatalf("writing to the helper: %v", err)
	}
}

// body sends a piece of id's body as the gateway does (protocol.RequestBody).
func (h *inProcess) body(t *testing.T, id, data string, last bool) {
	t.Helper()
	for _, e := range protocol.RequestBody(id, []byte(data), protocol.MinChunkBytes, last) {
		if err := protocol.WriteEncoded(h.in, e, protocol.MaxRequestBytes); err != nil {
			t.Fatalf("writing to the helper: %v", err)
		}
	}
}

func (h *inProcess) cancel(t *testing.T, id string) {
	t.Helper()
	h.send(t, &helperv1.SessionFrame{Frame: &helperv1.SessionFrame_Cancel{Cancel: &helperv1.Cancel{RequestId: id}}})
}

func (h *inProcess) request(t *testing.T, r *helperv1.Request) {
	t.Helper()
	h.send(t, &helperv1.SessionFrame{Frame: &helperv1.SessionFrame_Request{Request: r}})
}

// next is the helper's next frame; nil when it ended the session.
func (h *inProcess) next(t *testing.T) *helperv1.Frame {
	t.Helper()
	select {
	case f := <-h.frames:
		return f
	case <-time.After(10 * time.Second):
		t.Fatal("the helper wrote nothing within 10s")
		return nil
	}
}

// response is the helper's next frame, required to be a response.
func (h *inProcess) response(t *testing.T) *helperv1.Response {
	t.Helper()
	f := h.next(t)
	if f.GetResponse() == nil {
		t.Fatalf("want a response, got %v", f)
	}
	return f.GetResponse()
}

// refusedAndEnded requires the helper to end the session with a refusal that names no
// request (the gateway then closes the session), and ServeSession to return.
func (h *inProcess) refusedAndEnded(t *testing.T) {
	t.Helper()
	var last *helperv1.Frame
	for f := h.next(t); f != nil; f = h.next(t) {
		last = f
	}
	if r := last.GetResponse(); r == nil || r.GetRequestId() != "" || r.GetError().GetCode() != helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT {
		t.Fatalf("want a refusal without request id last, got %v", last)
	}
	select {
	case err := <-h.served:
		if err != nil {
			t.Fatalf("ServeSession: %v", err)
		}
		h.served <- err // for the cleanup
	case <-time.After(10 * time.Second):
		t.Fatal("the session did not end")
	}
}

func v2(id string, op *executionv1.FileOperation) *helperv1.Request {
	return &helperv1.Request{Version: helperv1.ProtocolVersion_PROTOCOL_VERSION_2, RequestId: id, Limits: limits(),
		Operation: &helperv1.Request_File{File: op}}
}

// bodyWrite is a write of size bytes whose content is to come as a body.
func bodyWrite(id, path string, mode executionv1.WriteMode, size int) *helperv1.Request {
	r := v2(id, writeOp(path, "", mode))
	r.GetFile().GetWrite().CreateParents = true
	r.BodyBytes = uint64(size)
	return r
}

// tree lists the workspace, the helper's temporary files included.
func tree(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, _ os.DirEntry, err error) error {
		if err == nil && p != root {
			rel, _ := filepath.Rel(root, p)
			out = append(out, rel)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A body the helper did not ask for, or more or less of one than announced, breaks the
// protocol: the helper refuses it without a request id, ends the session, and leaves
// nothing of the write behind.
func TestSessionRefusesAWrongBody(t *testing.T) {
	const path = "new/f"
	write := func(h *inProcess, t *testing.T) {
		h.request(t, bodyWrite("1", path, executionv1.WriteMode_WRITE_MODE_OVERWRITE, 4))
	}
	cases := []struct {
		name  string
		frame func(h *inProcess, t *testing.T)
		// left is what the workspace holds once the session ended.
		left []string
	}{
		{"a body for an unknown id", func(h *inProcess, t *testing.T) { h.body(t, "9", "abcd", true) }, nil},
		{"a body for another request's id", func(h *inProcess, t *testing.T) {
			write(h, t)
			h.body(t, "2", "abcd", true)
		}, nil},
		{"a body over body_bytes in one frame", func(h *inProcess, t *testing.T) {
			write(h, t)
			h.body(t, "1", "abcde", false)
		}, nil},
		{"a body over body_bytes across frames", func(h *inProcess, t *testing.T) {
			write(h, t)
			h.body(t, "1", "abc", false)
			h.body(t, "1", "de", true)
		}, nil},
		{"a last frame short of body_bytes", func(h *inProcess, t *testing.T) {
			write(h, t)
			h.body(t, "1", "abc", true)
		}, nil},
		{"a body frame after the last", func(h *inProcess, t *testing.T) {
			write(h, t)
			h.body(t, "1", "abcd", true)
			h.body(t, "1", "", true)
		}, []string{"new", path}}, // the whole body came first: the write committed
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root, _ := workspace(t)
			h := serveInProcess(t, root, 4)
			tc.frame(h, t)
			h.refusedAndEnded(t)
			if got := tree(t, root); !slices.Equal(got, tc.left) {
				t.Fatalf("the workspace holds %q", got)
			}
		})
	}
}

// A body announced where the operation takes none — body_bytes on a read, or on a write
// carrying its own content; body_response on anything but a read — is refused as that
// request's INVALID_ARGUMENT, nothing is done, and the session goes on.
func TestSessionRefusesABodyWhereTheOperationHasNone(t *testing.T) {
	cases := []struct {
		name string
		req  *helperv1.Request
	}{
		{"body_bytes on a read", func() *helperv1.Request {
			r := v2("1", readOp("f"))
			r.BodyBytes = 3
			return r
		}()},
		{"body_bytes on a write with content", func() *helperv1.Request {
			r := v2("1", writeOp("g", "xyz", executionv1.WriteMode_WRITE_MODE_OVERWRITE))
			r.BodyBytes = 3
			return r
		}()},
		{"body_response on a write", func() *helperv1.Request {
			r := v2("1", writeOp("g", "xyz", executionv1.WriteMode_WRITE_MODE_OVERWRITE))
			r.BodyResponse = true
			return r
		}()},
		{"body_response on a stat", func() *helperv1.Request {
			r := v2("1", statOp("f"))
			r.BodyResponse = true
			return r
		}()},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root, _ := workspace(t)
			if err := os.WriteFile(filepath.Join(root, "f"), []byte("abc"), 0o644); err != nil {
				t.Fatal(err)
			}
			h := serveInProcess(t, root, 4)
			h.request(t, tc.req)
			resp := h.response(t)
			if resp.GetRequestId() != "1" || resp.GetError().GetCode() != helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT {
				t.Fatalf("want INVALID_ARGUMENT for request 1, got %v", resp)
			}
			if tc.req.GetBodyBytes() > 0 {
				h.cancel(t, "1") // the gateway ends the body it will not send
			}
			// The session goes on, and the id is free again.
			h.request(t, v2("1", statOp("f")))
			if resp := h.response(t); resp.GetRequestId() != "1" || resp.GetFile().GetStat() == nil {
				t.Fatalf("the next request: %v", resp)
			}
			if got := tree(t, root); !slices.Equal(got, []string{"f"}) {
				t.Fatalf("the workspace holds %q", got)
			}
		})
	}
}

// A write cancelled part-way through its body is answered with an error and leaves no
// trace: no file, no temporary file, not even the parents it created; its id is free once
// answered.
func TestSessionCancelledBodyWritesNothing(t *testing.T) {
	root, _ := workspace(t)
	h := serveInProcess(t, root, 4)
	h.request(t, bodyWrite("1", "new/dir/f", executionv1.WriteMode_WRITE_MODE_OVERWRITE, 10))
	h.body(t, "1", "abcd", false)
	// The piece is in the temporary file beside the target, under the parents just made.
	await(t, 10*time.Second, "the first piece in a temporary file", func() bool {
		tmps, _ := filepath.Glob(filepath.Join(root, "new", "dir", ".execplane-*.tmp"))
		if len(tmps) != 1 {
			return false
		}
		st, err := os.Stat(tmps[0])
		return err == nil && st.Size() == 4
	})
	h.cancel(t, "1")
	resp := h.response(t)
	if resp.GetRequestId() != "1" || resp.GetError() == nil {
		t.Fatalf("want an error for the cancelled write, got %v", resp)
	}
	if got := tree(t, root); len(got) != 0 {
		t.Fatalf("the cancelled write left %q", got)
	}
	h.request(t, v2("1", statOp(".")))
	if resp := h.response(t); resp.GetRequestId() != "1" || resp.GetError() != nil {
		t.Fatalf("the id after the cancel: %v", resp)
	}
}

// A write refused at once (create-only on an existing file) is answered before its body
// is sent. The body the gateway still sends afterwards is taken silently, and the id stays
// in use until its last frame: reused before, it breaks the protocol; after, it is free.
func TestSessionWriteRefusedAtOnceTakesItsBodySilently(t *testing.T) {
	for _, sendBody := range []bool{true, false} {
		t.Run(map[bool]string{true: "the body ends, then the id is reused", false: "the id is reused before the body ends"}[sendBody], func(t *testing.T) {
			root, _ := workspace(t)
			if err := os.WriteFile(filepath.Join(root, "taken"), []byte("old"), 0o644); err != nil {
				t.Fatal(err)
			}
			h := serveInProcess(t, root, 4)
			h.request(t, bodyWrite("1", "taken", executionv1.WriteMode_WRITE_MODE_CREATE_ONLY, 8))
			resp := h.response(t) // no body frame sent yet
			if resp.GetRequestId() != "1" || resp.GetError().GetCode() != helperv1.ErrorCode_ERROR_CODE_ALREADY_EXISTS {
				t.Fatalf("want ALREADY_EXISTS for request 1, got %v", resp)
			}
			if sendBody {
				h.body(t, "1", "abcd", false)
				h.body(t, "1", "efgh", true)
			}
			h.request(t, v2("1", statOp("taken")))
			if !sendBody {
				h.refusedAndEnded(t)
				return
			}
			// The next frame answers the new request: the body drew no refusal.
			if resp := h.response(t); resp.GetRequestId() != "1" || resp.GetFile().GetStat() == nil {
				t.Fatalf("the id after the body ended: %v", resp)
			}
			if b, _ := os.ReadFile(filepath.Join(root, "taken")); string(b) != "old" {
				t.Fatalf("the refused write changed the file: %q", b)
			}
			if got := tree(t, root); !slices.Equal(got, []string{"taken"}) {
				t.Fatalf("the workspace holds %q", got)
			}
		})
	}
}

// A read with body_response answers with its content as body frames of at most a chunk,
// only the last marked, then the response, whose own content is empty.
func TestSessionReadAnswersWithABody(t *testing.T) {
	root, _ := workspace(t)
	content := make([]byte, 2*protocol.MinChunkBytes+3)
	_, _ = rand.Read(content)
	if err := os.WriteFile(filepath.Join(root, "f"), content, 0o644); err != nil {
		t.Fatal(err)
	}
	h := serveInProcess(t, root, 4)
	r := v2("1", readOp("f"))
	r.BodyResponse = true
	h.request(t, r)
	var got []byte
	var marks []bool
	for {
		f := h.next(t)
		if b := f.GetBody(); b != nil {
			if b.GetRequestId() != "1" || len(b.GetData()) > protocol.MinChunkBytes {
				t.Fatalf("a body frame of %q with %d bytes", b.GetRequestId(), len(b.GetData()))
			}
			got = append(got, b.GetData()...)
			marks = append(marks, b.GetLast())
			continue
		}
		resp := f.GetResponse()
		if resp.GetRequestId() != "1" || resp.GetFile().GetRead() == nil {
			t.Fatalf("want the read's response after its body, got %v", f)
		}
		if n := len(resp.GetFile().GetRead().GetContent()); n != 0 {
			t.Fatalf("the response carries %d bytes of content besides the body", n)
		}
		if size := resp.GetFile().GetRead().GetInfo().GetSize(); size != uint64(len(content)) {
			t.Fatalf("the response reports %d bytes", size)
		}
		break
	}
	if want := []bool{false, false, true}; !slices.Equal(marks, want) {
		t.Fatalf("last marks %v, want %v", marks, want)
	}
	if !bytes.Equal(got, content) {
		t.Fatalf("the body is %d bytes, not the file's %d", len(got), len(content))
	}
}

// A read answered with a body of nothing — an empty file, an offset at the end — still
// sends its (empty, marked) body before the response: the gateway's end requires it.
func TestSessionEmptyReadAnswersWithAnEmptyBody(t *testing.T) {
	for name, c := range map[string]struct {
		content string
		offset  uint64
	}{"an empty file": {"", 0}, "an offset at the end": {"abc", 3}} {
		t.Run(name, func(t *testing.T) {
			root, _ := workspace(t)
			if err := os.WriteFile(filepath.Join(root, "f"), []byte(c.content), 0o644); err != nil {
				t.Fatal(err)
			}
			inR, inW := io.Pipe()
			outR, outW := io.Pipe()
			end := func() { inR.Close(); outW.CloseWithError(io.EOF) }
			go func() { _ = helper.ServeSession(context.Background(), helper.Config{Root: root}, inR, outW); end() }()
			s, err := session.Open(context.Background(), session.Config{Heartbeat: time.Second}, inW, outR, end)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close(session.ReasonDrain)
			req := &helperv1.Request{Limits: limits(), BodyResponse: true, Operation: &helperv1.Request_File{File: &executionv1.FileOperation{
				Operation: &executionv1.FileOperation_Read{Read: &executionv1.ReadFile{Path: []byte("f"), Offset: c.offset}}}}}
			pieces := 0
			resp, err := s.Stream(context.Background(), req, 1<<20, session.Transfer{Download: func(b []byte) error { pieces += len(b); return nil }})
			if err != nil || resp.GetFile().GetRead() == nil || pieces != 0 || s.Reason() != "" {
				t.Fatalf("%v / %v (%d bytes, session %q)", resp, err, pieces, s.Reason())
			}
			if got := resp.GetFile().GetRead().GetInfo().GetSize(); got != uint64(len(c.content)) {
				t.Fatalf("the result says %d bytes", got)
			}
		})
	}
}
