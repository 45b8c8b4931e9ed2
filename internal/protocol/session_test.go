package protocol

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// The hand-encoded chunk frames decode, with the generated strict decoder, as the frames
// the generated encoder would write, and reassemble into the message they cut.
func TestChunksDecodeAsGeneratedFramesAndReassemble(t *testing.T) {
	for _, size := range []int{0, 1, MinChunkBytes - 1, MinChunkBytes, 5*MinChunkBytes + 7} {
		payload := bytes.Repeat([]byte{0xa5}, size)
		var req, resp []*helperv1.Chunk
		for _, e := range RequestChunks("7", payload, MinChunkBytes) {
			var f helperv1.SessionFrame
			if err := DecodeFrame(append(append([]byte(nil), e.Head...), e.Body...), &f); err != nil {
				t.Fatalf("%d bytes: %v", size, err)
			}
			req = append(req, f.GetRequestChunk())
		}
		for _, e := range ResponseChunks("7", payload, MinChunkBytes) {
			var f helperv1.Frame
			if err := DecodeFrame(append(append([]byte(nil), e.Head...), e.Body...), &f); err != nil {
				t.Fatalf("%d bytes: %v", size, err)
			}
			resp = append(resp, f.GetResponseChunk())
		}
		if diff := cmp.Diff(req, resp, protocmp.Transform()); diff != "" {
			t.Fatalf("request and response chunks differ: %s", diff)
		}
		a := NewAssembly(size)
		for i, c := range req {
			if c.GetRequestId() != "7" || c.GetLast() != (i == len(req)-1) || len(c.GetData()) > MinChunkBytes {
				t.Fatalf("%d bytes: chunk %d is %v/%v/%d", size, i, c.GetRequestId(), c.GetLast(), len(c.GetData()))
			}
			if err := a.Add(c.GetData()); err != nil {
				t.Fatal(err)
			}
		}
		if a.Len() != size {
			t.Fatalf("reassembled %d of %d bytes", a.Len(), size)
		}
	}
}

// Body frames decode as the generated SessionFrame.body and Frame.body, are cut at the
// chunk size, and only the end of a body is marked.
func TestBodiesDecodeAsGeneratedFrames(t *testing.T) {
	for _, size := range []int{0, 1, MinChunkBytes, 3*MinChunkBytes + 5} {
		content := bytes.Repeat([]byte{0x5a}, size)
		for _, end := range []bool{false, true} {
			var got []byte
			frames := RequestBody("9", content, MinChunkBytes, end)
			for i, e := range frames {
				var f helperv1.SessionFrame
				if err := DecodeFrame(append(append([]byte(nil), e.Head...), e.Body...), &f); err != nil {
					t.Fatalf("%d bytes: %v", size, err)
				}
				b := f.GetBody()
				if b == nil || b.GetRequestId() != "9" || b.GetLast() != (end && i == len(frames)-1) || len(b.GetData()) > MinChunkBytes {
					t.Fatalf("%d bytes, end %v: frame %d is %v", size, end, i, &f)
				}
				got = append(got, b.GetData()...)
			}
			if !bytes.Equal(got, content) {
				t.Fatalf("%d bytes: the body reassembles as %d bytes", size, len(got))
			}
		}
		var got []byte
		for _, e := range ResponseBody("9", content, MinChunkBytes) {
			p, err := ReadResponseFrame(bytes.NewReader(frameOf(t, e)), &helperv1.Frame{}, SessionFrameCap(MinChunkBytes))
			if err != nil || p == nil || !p.Body {
				t.Fatalf("%d bytes: read %v, %v", size, p, err)
			}
			got = append(got, p.GetData()...)
		}
		if !bytes.Equal(got, content) {
			t.Fatalf("%d bytes: the response body reads back as %d bytes", size, len(got))
		}
	}
}

func frameOf(t *testing.T, e Encoded) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := WriteEncoded(&b, e, MaxResponseBytes); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestAssemblyRefusesToGrowPastItsLimit(t *testing.T) {
	a := NewAssembly(10)
	if err := a.Add(make([]byte, 6)); err != nil {
		t.Fatal(err)
	}
	if err := a.Add(make([]byte, 5)); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("want ErrFrameTooLarge, got %v", err)
	}
	if a.Len() != 6 {
		t.Fatalf("a refused chunk was kept: %d bytes", a.Len())
	}
}

func TestHandshakeTakesTheSmallerBounds(t *testing.T) {
	hello := NewHello(128, 4<<20, 2*time.Second).GetHello()
	ready, err := Accept(hello)
	if err != nil {
		t.Fatal(err)
	}
	if ready.GetMaxInFlight() != MaxInFlightCeiling || ready.GetChunkBytes() != MaxChunkBytes || ready.GetHeartbeatMillis() != 2000 {
		t.Fatalf("ready %v", ready)
	}
	if err := CheckReady(hello, ready); err != nil {
		t.Fatal(err)
	}
	// Bodies only to a gateway that asks for them, and never offered unasked.
	if !ready.GetBodies() {
		t.Fatal("a gateway asking for bodies was not offered them")
	}
	older := &helperv1.SessionHello{Versions: hello.GetVersions(), MaxInFlight: 4, ChunkBytes: MinChunkBytes, HeartbeatMillis: 1000}
	r, err := Accept(older)
	if err != nil || r.GetBodies() {
		t.Fatalf("a hello without bodies: %v %v", r, err)
	}
	if err := CheckReady(older, r); err != nil {
		t.Fatal(err)
	}
	r.Bodies = true
	if err := CheckReady(older, r); err == nil {
		t.Fatal("a ready offering bodies to a gateway that did not ask was accepted")
	}
	// Version 4 (record keys, replay-only starts) when both speak it; 3 (keys only) with a
	// helper of the release before, which reads the hello's 4 as an enum value it does not
	// know; 2 with a gateway that offers only 2; an older helper, which knows only 2, reads
	// the hello's 4 and 3 so too, picks 2, and the gateway then gives it no keys.
	if !SealsRecords(ready) || !ReplaysOnly(ready) {
		t.Fatalf("a hello offering 4, 3 and 2 got %v", ready.GetVersion())
	}
	three := proto.CloneOf(hello)
	three.Versions = []helperv1.ProtocolVersion{helperv1.ProtocolVersion_PROTOCOL_VERSION_3, helperv1.ProtocolVersion_PROTOCOL_VERSION_2}
	if r, err := Accept(three); err != nil || !SealsRecords(r) || ReplaysOnly(r) || CheckReady(three, r) != nil {
		t.Fatalf("a hello offering 3 and 2: %v %v", r, err)
	}
	two := &helperv1.SessionHello{Versions: []helperv1.ProtocolVersion{helperv1.ProtocolVersion_PROTOCOL_VERSION_2}, MaxInFlight: 4, ChunkBytes: MinChunkBytes, HeartbeatMillis: 1000}
	if r, err := Accept(two); err != nil || SealsRecords(r) || ReplaysOnly(r) || CheckReady(two, r) != nil {
		t.Fatalf("a hello offering 2 only: %v %v", r, err)
	}
	if err := CheckReady(two, ready); err == nil {
		t.Fatal("a ready of version 4 to a hello offering 2 only was accepted")
	}
	// As an older helper meets 3: a version its enum does not name decodes strictly (an open
	// enum keeps the number; no unknown field) and is passed by.
	future := proto.CloneOf(two)
	future.Versions = []helperv1.ProtocolVersion{99, helperv1.ProtocolVersion_PROTOCOL_VERSION_2}
	data, err := proto.Marshal(future)
	if err != nil {
		t.Fatal(err)
	}
	var decoded helperv1.SessionHello
	if err := DecodeFrame(data, &decoded); err != nil {
		t.Fatalf("a hello offering a version the helper does not know does not decode strictly: %v", err)
	}
	if r, err := Accept(&decoded); err != nil || r.GetVersion() != helperv1.ProtocolVersion_PROTOCOL_VERSION_2 {
		t.Fatalf("a hello offering 99 and 2: %v %v", r, err)
	}
	for name, h := range map[string]*helperv1.SessionHello{
		"no version":     {MaxInFlight: 1, ChunkBytes: MinChunkBytes, HeartbeatMillis: 1000},
		"version 1 only": {Versions: []helperv1.ProtocolVersion{helperv1.ProtocolVersion_PROTOCOL_VERSION_1}, MaxInFlight: 1, ChunkBytes: MinChunkBytes, HeartbeatMillis: 1000},
		"tiny chunks":    NewHello(1, 1024, time.Second).GetHello(),
		"no requests":    NewHello(0, MinChunkBytes, time.Second).GetHello(),
		"rare heartbeat": NewHello(1, MinChunkBytes, time.Hour).GetHello(),
	} {
		if _, err := Accept(h); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// WriteEncoded writes the same bytes as the payload joined, in one piece or in parts.
func TestWriteEncodedWritesTheFrame(t *testing.T) {
	for _, e := range []Encoded{Whole([]byte("abc")), {Head: []byte("ab"), Body: []byte("cd")},
		{Head: []byte("h"), Body: bytes.Repeat([]byte("b"), joinBytes+1)}, Whole(bytes.Repeat([]byte("w"), joinBytes+1))} {
		var got, want bytes.Buffer
		if err := WriteEncoded(&got, e, MaxResponseBytes); err != nil {
			t.Fatal(err)
		}
		_ = WritePayload(&want, append(append([]byte(nil), e.Head...), e.Body...), MaxResponseBytes)
		if !bytes.Equal(got.Bytes(), want.Bytes()) {
			t.Fatalf("%d bytes written differently", e.Len())
		}
	}
	if err := WriteEncoded(&bytes.Buffer{}, Whole(make([]byte, 11)), 10); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("over the cap: %v", err)
	}
}

// FuzzChunkFastPath: whatever the fast chunk parser accepts, the generated strict decoder
// accepts too, as the same chunk.
func FuzzChunkFastPath(f *testing.F) {
	for _, e := range ResponseChunks("12", []byte("some data"), MinChunkBytes) {
		f.Add(append(append([]byte(nil), e.Head...), e.Body...))
	}
	for _, e := range RequestBody("13", []byte("a body"), MinChunkBytes, false) {
		f.Add(append(append([]byte(nil), e.Head...), e.Body...))
	}
	f.Add([]byte{0x22, 0x00})
	f.Add([]byte{0x22, 0x04, 0x18, 0x01, 0x18, 0x00})
	f.Fuzz(func(t *testing.T, payload []byte) {
		for _, field := range []struct {
			number protowire.Number
			msg    func() proto.Message
			get    func(proto.Message) *helperv1.Chunk
		}{
			{responseChunkField, func() proto.Message { return &helperv1.Frame{} }, func(m proto.Message) *helperv1.Chunk { return m.(*helperv1.Frame).GetResponseChunk() }},
			{requestChunkField, func() proto.Message { return &helperv1.SessionFrame{} }, func(m proto.Message) *helperv1.Chunk { return m.(*helperv1.SessionFrame).GetRequestChunk() }},
			{requestBodyField, func() proto.Message { return &helperv1.SessionFrame{} }, func(m proto.Message) *helperv1.Chunk { return m.(*helperv1.SessionFrame).GetBody() }},
			{responseBodyField, func() proto.Message { return &helperv1.Frame{} }, func(m proto.Message) *helperv1.Chunk { return m.(*helperv1.Frame).GetBody() }},
		} {
			fast, ok := parseChunk(payload, field.number)
			if !ok {
				continue
			}
			m := field.msg()
			if err := DecodeFrame(payload, m); err != nil {
				t.Fatalf("the fast path accepted what the decoder refuses: %v", err)
			}
			if slow := field.get(m); slow == nil || !proto.Equal(slow, fast) {
				t.Fatalf("the fast path read %v, the decoder %v", fast, slow)
			}
		}
	})
}
