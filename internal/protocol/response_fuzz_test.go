package protocol

import (
	"bytes"
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// FuzzReadResponse feeds what a hostile executor could write on stdout to the gateway's
// reader of helper frames: it never panics, never accepts more than the cap, and either
// returns exactly one decoded response or an error (ErrViolation for anything malformed).
func FuzzReadResponse(f *testing.F) {
	frames := func(fs ...*helperv1.Frame) []byte {
		var b bytes.Buffer
		for _, fr := range fs {
			_ = WriteFrame(&b, fr, MaxResponseBytes)
		}
		return b.Bytes()
	}
	hb := &helperv1.Frame{Frame: &helperv1.Frame_Heartbeat{Heartbeat: &helperv1.Heartbeat{ElapsedMillis: 5}}}
	ok := &helperv1.Frame{Frame: &helperv1.Frame_Response{Response: &helperv1.Response{RequestId: "r",
		Outcome: &helperv1.Response_File{File: &executionv1.FileResult{Result: &executionv1.FileResult_Read{Read: &executionv1.ReadFileResult{Content: []byte("x")}}}}}}}
	f.Add(frames(ok))
	f.Add(frames(hb, hb, ok))
	f.Add(frames(ok, ok))
	f.Add(append(frames(ok), 0))
	f.Add(frames(&helperv1.Frame{}))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0, 0, 0, 3, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		const responseCap = 1 << 12 // keep the fuzzer's allocations small
		aborted := false
		res := ReadResponse(bytes.NewReader(data), responseCap, func() {}, func() { aborted = true })
		switch {
		case res.Err != nil:
			if !errors.Is(res.Err, ErrViolation) {
				t.Fatalf("a malformed stream is not a protocol error: %v", res.Err)
			}
			if res.Resp != nil {
				t.Fatal("a response beside an error")
			}
		case res.Resp != nil:
			if aborted {
				t.Fatal("a response from an aborted stream")
			}
			if n := proto.Size(res.Resp); n > responseCap {
				t.Fatalf("a response of %d bytes accepted under a cap of %d", n, responseCap)
			}
		}
	})
}
