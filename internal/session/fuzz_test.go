package session

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/execplane/execplane/internal/protocol"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// FuzzAnswers feeds arbitrary bytes as the helper's output after a valid handshake: the
// session never panics, never holds more than the frame cap, and the call ends — with a
// response only when the bytes were one, and the session closed on anything else.
func FuzzAnswers(f *testing.F) {
	frame := func(fr *helperv1.Frame) []byte {
		b, _ := protocol.Marshal(fr)
		out := make([]byte, 4, 4+len(b))
		out[0], out[1], out[2], out[3] = byte(len(b)>>24), byte(len(b)>>16), byte(len(b)>>8), byte(len(b))
		return append(out, b...)
	}
	f.Add(frame(fileAnswer("1", []byte("ok"))))
	f.Add(frame(&helperv1.Frame{Frame: &helperv1.Frame_ResponseChunk{ResponseChunk: &helperv1.Chunk{RequestId: "1", Data: []byte{0x0a, 0x01, 0x31}, Last: true}}}))
	f.Add(append(frame(&helperv1.Frame{Frame: &helperv1.Frame_Heartbeat{Heartbeat: &helperv1.Heartbeat{}}}), 0, 0, 0, 1, 0xff))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		in, out, p, end := pair(t)
		go func() {
			p.handshake(t)
			p.read(t)
			p.raw(data)
			p.out.CloseWithError(io.EOF)
			io.Copy(io.Discard, p.in) //nolint:errcheck // until the session ends
		}()
		s, err := Open(context.Background(), Config{Heartbeat: time.Minute}, in, out, end)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close(ReasonDrain)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := s.Do(ctx, readReq("a"), 64<<10)
		switch {
		case ctx.Err() != nil:
			t.Fatal("the call did not end")
		case err == nil && resp.GetRequestId() != "1":
			t.Fatalf("a response for another request: %v", resp)
		case err != nil && resp != nil:
			t.Fatal("both a response and an error")
		}
	})
}
