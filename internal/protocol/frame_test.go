package protocol

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

func sampleRequest() *helperv1.Request {
	return &helperv1.Request{
		Version:   helperv1.ProtocolVersion_PROTOCOL_VERSION_1,
		RequestId: "r-1",
		Limits:    &helperv1.Limits{MaxFileBytes: 1 << 20},
		Operation: &helperv1.Request_File{File: &executionv1.FileOperation{
			Operation: &executionv1.FileOperation_Read{Read: &executionv1.ReadFile{Path: []byte("a/b")}},
		}},
	}
}

func TestRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteFrame(&buf, sampleRequest(), MaxRequestBytes); err != nil {
		t.Fatal(err)
	}
	var got helperv1.Request
	if err := ReadFrame(&buf, &got, MaxRequestBytes); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(&got, sampleRequest()) {
		t.Fatalf("round trip changed the message: %v", &got)
	}
	if err := ReadFrame(&buf, &got, MaxRequestBytes); !errors.Is(err, io.EOF) {
		t.Fatalf("clean end: want io.EOF, got %v", err)
	}
}

func TestOversizedLengthRefusedBeforeAllocation(t *testing.T) {
	var header [4]byte
	binary.BigEndian.PutUint32(header[:], 0xFFFFFFFF)
	// No payload follows: a reader that allocated first would block or fail differently.
	err := ReadFrame(bytes.NewReader(header[:]), &helperv1.Request{}, MaxRequestBytes)
	if !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("want ErrFrameTooLarge, got %v", err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 100 {
		_ = ReadFrame(bytes.NewReader(header[:]), &helperv1.Request{}, MaxRequestBytes)
	}
	runtime.ReadMemStats(&after)
	if perCall := (after.TotalAlloc - before.TotalAlloc) / 100; perCall > 4096 {
		t.Fatalf("an oversized frame header cost %d bytes of allocation", perCall)
	}
}

func TestWriteRefusesOversizedMessage(t *testing.T) {
	big := &helperv1.Request{RequestId: string(bytes.Repeat([]byte("x"), 100))}
	if err := WriteFrame(io.Discard, big, 10); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("want ErrFrameTooLarge, got %v", err)
	}
}

func TestTruncatedFrames(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteFrame(&buf, sampleRequest(), MaxRequestBytes); err != nil {
		t.Fatal(err)
	}
	full := buf.Bytes()
	for _, n := range []int{1, 3, 5, len(full) - 1} {
		err := ReadFrame(bytes.NewReader(full[:n]), &helperv1.Request{}, MaxRequestBytes)
		if !errors.Is(err, ErrFrameTruncated) {
			t.Errorf("cut at %d: want ErrFrameTruncated, got %v", n, err)
		}
	}
}

func TestInvalidAndUnknownPayloadsRefused(t *testing.T) {
	frameOf := func(payload []byte) []byte {
		out := binary.BigEndian.AppendUint32(nil, uint32(len(payload)))
		return append(out, payload...)
	}
	good, _ := proto.Marshal(sampleRequest())
	unknownTop := protowire.AppendTag(append([]byte(nil), good...), 999, protowire.VarintType)
	unknownTop = protowire.AppendVarint(unknownTop, 1)
	// An unknown field nested inside Limits (field 3).
	limits := protowire.AppendTag(nil, 77, protowire.BytesType)
	limits = protowire.AppendBytes(limits, []byte("x"))
	nested := protowire.AppendTag(append([]byte(nil), good...), 3, protowire.BytesType)
	nested = protowire.AppendBytes(nested, limits)
	cases := map[string][]byte{
		"garbage":         {0xff, 0xff, 0xff},
		"bad utf8 string": protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), []byte{0xff, 0xfe}),
		"unknown field":   unknownTop,
		"nested unknown":  nested,
	}
	for name, payload := range cases {
		t.Run(name, func(t *testing.T) {
			err := ReadFrame(bytes.NewReader(frameOf(payload)), &helperv1.Request{}, MaxRequestBytes)
			if !errors.Is(err, ErrInvalidFrame) {
				t.Fatalf("want ErrInvalidFrame, got %v", err)
			}
		})
	}
}

func FuzzRead(f *testing.F) {
	var buf bytes.Buffer
	_ = WriteFrame(&buf, sampleRequest(), MaxRequestBytes)
	f.Add(buf.Bytes())
	resp := &helperv1.Frame{Frame: &helperv1.Frame_Response{Response: &helperv1.Response{
		Outcome: &helperv1.Response_Error{Error: &helperv1.Error{Code: helperv1.ErrorCode_ERROR_CODE_NOT_FOUND}},
	}}}
	buf.Reset()
	_ = WriteFrame(&buf, resp, MaxResponseBytes)
	f.Add(buf.Bytes())
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		const small = 1 << 16 // keep the fuzzer's allocations small
		var req helperv1.Request
		if err := ReadFrame(bytes.NewReader(data), &req, small); err == nil {
			// Whatever decodes must re-encode and decode to the same message.
			var again bytes.Buffer
			if err := WriteFrame(&again, &req, small); err != nil {
				t.Fatalf("decoded message does not re-encode: %v", err)
			}
			var back helperv1.Request
			if err := ReadFrame(&again, &back, small); err != nil || !proto.Equal(&req, &back) {
				t.Fatalf("re-encoded message differs: %v", err)
			}
		}
		var fr helperv1.Frame
		_ = ReadFrame(bytes.NewReader(data), &fr, small)
	})
}

// writes records the size of every Write.
type writes struct{ sizes []int }

func (w *writes) Write(p []byte) (int, error) { w.sizes = append(w.sizes, len(p)); return len(p), nil }

// A large frame's header and head go out with the start of its body in one Write of the
// exec stream's message size — never as a message of a few bytes of their own.
func TestLargeFramesStartWithAWholeStreamMessage(t *testing.T) {
	for _, e := range []Encoded{
		{Head: []byte("head"), Body: make([]byte, 256<<10)},
		Whole(make([]byte, 200<<10)),
		{Head: make([]byte, 40<<10), Body: make([]byte, 40<<10)},
	} {
		var w writes
		if err := WriteEncoded(&w, e, MaxRequestBytes); err != nil {
			t.Fatal(err)
		}
		total := 0
		for _, n := range w.sizes {
			total += n
		}
		if total != headerBytes+e.Len() || w.sizes[0] < streamMessageBytes || len(w.sizes) > 2 {
			t.Fatalf("a %d-byte frame written as %v", e.Len(), w.sizes)
		}
	}
}
