package backlog

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// recorder is frameEvents as a list of lines; it decodes header blocks as a Conn does.
type recorder struct {
	dec    *hpack.Decoder
	events []string
}

func newRecorder() *recorder { return &recorder{dec: hpack.NewDecoder(headerTableSize, nil)} }

func (r *recorder) data(sid uint32, n int) {
	// Pieces of one frame add up: merge consecutive data events of a stream.
	if k := len(r.events) - 1; k >= 0 {
		var s uint32
		var m int
		if _, err := fmt.Sscanf(r.events[k], "data %d %d", &s, &m); err == nil && s == sid {
			r.events[k] = fmt.Sprintf("data %d %d", sid, m+n)
			return
		}
	}
	r.events = append(r.events, fmt.Sprintf("data %d %d", sid, n))
}

func (r *recorder) headers(sid uint32, block []byte) error {
	fields, err := r.dec.DecodeFull(block)
	if err != nil {
		return err
	}
	line := fmt.Sprintf("headers %d", sid)
	for _, f := range fields {
		line += " " + f.Name + "=" + f.Value
	}
	r.events = append(r.events, line)
	return nil
}

func (r *recorder) ended(sid uint32) { r.events = append(r.events, fmt.Sprintf("ended %d", sid)) }
func (r *recorder) reset(sid uint32) { r.events = append(r.events, fmt.Sprintf("reset %d", sid)) }

// serverFrames is what a gRPC server writes for a few calls: settings, response headers,
// data frames across streams, trailers, a reset, a padded header block and one split
// over CONTINUATION frames.
func serverFrames(t testing.TB) []byte {
	var buf, hbuf bytes.Buffer
	fr := http2.NewFramer(&buf, nil)
	enc := hpack.NewEncoder(&hbuf)
	block := func(fields ...string) []byte {
		hbuf.Reset()
		for i := 0; i < len(fields); i += 2 {
			if err := enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]}); err != nil {
				t.Fatal(err)
			}
		}
		return bytes.Clone(hbuf.Bytes())
	}
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(fr.WriteSettings(http2.Setting{ID: http2.SettingMaxFrameSize, Val: 16384}))
	must(fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block(":status", "200", RequestIDHeader, "a1"), EndHeaders: true}))
	must(fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: block(":status", "200", RequestIDHeader, "b3"), EndHeaders: true, PadLength: 7}))
	must(fr.WriteData(1, false, make([]byte, 10000)))
	must(fr.WriteData(3, false, make([]byte, 300)))
	must(fr.WriteData(1, false, make([]byte, 5)))
	must(fr.WritePing(false, [8]byte{1}))
	must(fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block("grpc-status", "0"), EndHeaders: true, EndStream: true}))
	must(fr.WriteRSTStream(3, http2.ErrCodeCancel))
	long := block(":status", "200", RequestIDHeader, "c5", "x-pad", string(bytes.Repeat([]byte("z"), 40000)))
	must(fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 5, BlockFragment: long[:100], Priority: http2.PriorityParam{Weight: 3}}))
	must(fr.WriteContinuation(5, false, long[100:20000]))
	must(fr.WriteContinuation(5, true, long[20000:]))
	must(fr.WriteData(5, true, make([]byte, 0)))
	return buf.Bytes()
}

var wantServerEvents = []string{
	"headers 1 :status=200 x-request-id=a1",
	"headers 3 :status=200 x-request-id=b3",
	"data 1 10000",
	"data 3 300",
	"data 1 5",
	"headers 1 grpc-status=0",
	"ended 1",
	"reset 3",
	"headers 5 :status=200 x-request-id=c5 x-pad=" + string(bytes.Repeat([]byte("z"), 40000)),
	"ended 5",
}

func scan(t testing.TB, wire []byte, pieces func(int) int) []string {
	r := newRecorder()
	s := scanner{ev: r, blocks: true}
	for len(wire) > 0 {
		n := min(max(pieces(len(wire)), 1), len(wire))
		if err := s.feed(wire[:n]); err != nil {
			t.Fatal(err)
		}
		wire = wire[n:]
	}
	return r.events
}

// The scanner sees the same frames however the writes cut them: whole, byte by byte, and
// at random cuts.
func TestScannerFollowsFramesAcrossWrites(t *testing.T) {
	wire := serverFrames(t)
	rng := rand.New(rand.NewPCG(1, 2))
	cuts := map[string]func(int) int{
		"whole":       func(n int) int { return n },
		"byte":        func(int) int { return 1 },
		"random":      func(n int) int { return 1 + rng.IntN(min(n, 20000)) },
		"header-size": func(int) int { return frameHeaderLen },
	}
	for name, cut := range cuts {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(wantServerEvents, scan(t, wire, cut)); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

// The read side skips the client preface, and a client's END_STREAM is not a reset.
func TestScannerClientSide(t *testing.T) {
	var buf bytes.Buffer
	buf.WriteString(http2.ClientPreface)
	fr := http2.NewFramer(&buf, nil)
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte{0x82}, EndHeaders: false}); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteContinuation(1, true, []byte{0x84}); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteData(1, true, []byte("req")); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteRSTStream(1, http2.ErrCodeCancel); err != nil {
		t.Fatal(err)
	}
	r := newRecorder()
	s := scanner{preface: clientPrefaceLen, ev: r}
	if err := s.feed(buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"data 1 3", "ended 1", "reset 1"}, r.events); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// Frames the accounting cannot follow are errors, never a guess.
func TestScannerRefusesWhatItCannotFollow(t *testing.T) {
	frame := func(typ, flags byte, sid uint32, payload []byte) []byte {
		var buf bytes.Buffer
		fr := http2.NewFramer(&buf, nil)
		if err := fr.WriteRawFrame(http2.FrameType(typ), http2.Flags(flags), sid, payload); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	cases := map[string][]byte{
		"continuation outside a block": frame(frameContinuation, flagEndHeaders, 1, []byte{0x82}),
		"block interrupted":            append(frame(frameHeaders, 0, 1, []byte{0x82}), frame(frameData, 0, 1, []byte("x"))...),
		"padding past the end":         frame(frameHeaders, flagEndHeaders|flagPadded, 1, []byte{9, 0x82}),
		"block too large": append(frame(frameHeaders, 0, 1, make([]byte, 16000)),
			bytes.Repeat(frame(frameContinuation, 0, 1, make([]byte, 16000)), 4)...),
		"not HPACK": frame(frameHeaders, flagEndHeaders, 1, []byte{0xff, 0xff, 0xff, 0xff}),
	}
	for name, wire := range cases {
		t.Run(name, func(t *testing.T) {
			s := scanner{ev: newRecorder(), blocks: true}
			if err := s.feed(wire); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

// FuzzScanner: any bytes, in any cuts, are followed or refused without panicking, and
// the cuts never change what is seen.
func FuzzScanner(f *testing.F) {
	f.Add(serverFrames(f), uint64(1))
	f.Add([]byte{0, 0, 0, 1, 4, 0, 0, 0, 1}, uint64(2))
	f.Fuzz(func(t *testing.T, wire []byte, seed uint64) {
		whole := newRecorder()
		ws := scanner{ev: whole, blocks: true}
		werr := ws.feed(wire)
		cut := newRecorder()
		cs := scanner{ev: cut, blocks: true}
		rng := rand.New(rand.NewPCG(seed, seed))
		var cerr error
		for rest := wire; len(rest) > 0 && cerr == nil; {
			n := 1 + rng.IntN(len(rest))
			cerr = cs.feed(rest[:n])
			rest = rest[n:]
		}
		if (werr == nil) != (cerr == nil) {
			t.Fatalf("whole: %v, cut: %v", werr, cerr)
		}
		if werr == nil {
			if diff := cmp.Diff(whole.events, cut.events); diff != "" {
				t.Fatalf("cuts changed the events (-whole +cut):\n%s", diff)
			}
		}
	})
}
