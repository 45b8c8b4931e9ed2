package protocol

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// recorder is a session stream that records the frames written to it, in order, as labels
// ("body s:s1", "body s:s4 last", "chunk m:m1", "cancel a"), beside the events tests mark.
// With a gate, each Write waits for a token, so that a test decides when the writer gets on;
// entered gets a token as each Write begins.
type recorder struct {
	gate    chan struct{}
	entered chan struct{}

	mu     sync.Mutex
	buf    []byte
	events []string
	frames int
}

// newRecorder returns a recorder; gated makes every Write wait for a token on gate.
func newRecorder(gated bool) *recorder {
	r := &recorder{entered: make(chan struct{}, 64)}
	if gated {
		r.gate = make(chan struct{})
	}
	return r
}

func (r *recorder) Write(p []byte) (int, error) {
	r.entered <- struct{}{}
	if r.gate != nil {
		<-r.gate
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.buf = append(r.buf, p...)
	for len(r.buf) >= 4 {
		n := int(binary.BigEndian.Uint32(r.buf))
		if len(r.buf) < 4+n {
			break
		}
		r.events = append(r.events, label(r.buf[:4+n]))
		r.frames++
		r.buf = r.buf[4+n:]
	}
	return len(p), nil
}

// mark records an event between frames, with how many frames were whole by then.
func (r *recorder) mark(event string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, fmt.Sprintf("%s after %d", event, r.frames))
}

func (r *recorder) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// label names one whole frame, decoded the way the helper reads its stdin.
func label(frame []byte) string {
	var f helperv1.SessionFrame
	p, err := ReadRequestFrame(bytes.NewReader(frame), &f, MaxRequestBytes)
	switch {
	case err != nil:
		return "undecodable: " + err.Error()
	case p != nil && p.Body:
		s := fmt.Sprintf("body %s:%s", p.GetRequestId(), p.GetData())
		if p.GetLast() {
			s += " last"
		}
		return s
	case p != nil:
		return fmt.Sprintf("chunk %s:%s", p.GetRequestId(), p.GetData())
	case f.GetCancel() != nil:
		return "cancel " + f.GetCancel().GetRequestId()
	default:
		return fmt.Sprintf("unexpected %v", &f)
	}
}

// body is one SessionFrame body frame of data for id, marked last when last.
func body(id, data string, last bool) []Encoded {
	return RequestBody(id, []byte(data), 64, last)
}

// whole is a message of one frame: a Cancel for id.
func whole(t *testing.T, id string) []Encoded {
	t.Helper()
	b, err := Marshal(&helperv1.SessionFrame{Frame: &helperv1.SessionFrame_Cancel{Cancel: &helperv1.Cancel{RequestId: id}}})
	if err != nil {
		t.Fatal(err)
	}
	return []Encoded{Whole(b)}
}

// chunked is a whole message of several frames: the request chunks of id, two bytes each.
func chunked(id, data string) []Encoded { return RequestChunks(id, []byte(data), 2) }

// release lets n gated writes through, failing when the writer does not get to them.
func (r *recorder) release(t *testing.T, n int) {
	t.Helper()
	for i := range n {
		select {
		case r.gate <- struct{}{}:
		case <-time.After(5 * time.Second):
			t.Fatalf("the writer stopped after %d of %d more writes: %v", i, n, r.got())
		}
	}
}

func stopped(t *testing.T, w *Writer) {
	t.Cleanup(w.Stop)
}

// A Stream's frames are written in order, taking their turn in the round-robin with a
// whole message sent meanwhile, and its last callback runs once every frame but the final
// one is written — not when the end was sent.
func TestStreamFramesTakeTheirTurnInOrder(t *testing.T) {
	r := newRecorder(true)
	w := NewWriter(r, MaxRequestBytes, nil)
	stopped(t, w)
	w.Send(whole(t, "a"), nil) // holds the writer until the gate opens
	st := w.Open(append(body("s", "s1", false), body("s", "s2", false)...), nil)
	w.Send(chunked("m", "m1m2m3"), nil)
	st.Send(body("s", "s3", false), false, nil)
	st.Send(body("s", "s4", true), true, func() { r.mark("last") })
	r.release(t, 8)
	w.Flush(5 * time.Second)
	want := []string{"cancel a", "body s:s1", "chunk m:m1", "body s:s2", "chunk m:m2", "body s:s3", "chunk m:m3", "last after 7", "body s:s4 last"}
	if got := r.got(); !slices.Equal(got, want) {
		t.Fatalf("written:\n got %q\nwant %q", got, want)
	}
	if n := w.Queued(); n != 0 {
		t.Fatalf("%d messages still queued", n)
	}
}

// A stream with no frame waiting — opened empty, or all its frames written — holds no
// place in the queue: whole messages go past it, and it resumes when it has more.
func TestAParkedStreamDoesNotHoldOthers(t *testing.T) {
	r := newRecorder(false)
	w := NewWriter(r, MaxRequestBytes, nil)
	stopped(t, w)
	empty := w.Open(nil, nil)
	st := w.Open(body("s", "s1", false), nil)
	w.Send(chunked("m", "m1m2"), nil)
	w.Flush(5 * time.Second)
	if got, want := r.got(), []string{"body s:s1", "chunk m:m1", "chunk m:m2"}; !slices.Equal(got, want) {
		t.Fatalf("while two streams are open and idle:\n got %q\nwant %q", got, want)
	}
	if n := w.Queued(); n != 0 {
		t.Fatalf("idle streams count as %d queued messages", n)
	}
	w.Send(whole(t, "x"), nil)
	st.Send(body("s", "s2", true), true, func() { r.mark("last") })
	empty.Send(body("e", "e1", true), true, nil)
	w.Flush(5 * time.Second)
	want := []string{"body s:s1", "chunk m:m1", "chunk m:m2", "cancel x", "last after 4", "body s:s2 last", "body e:e1 last"}
	if got := r.got(); !slices.Equal(got, want) {
		t.Fatalf("after the streams resumed:\n got %q\nwant %q", got, want)
	}
	// Ended, a stream takes no more.
	st.Send(body("s", "late", true), true, nil)
	w.Send(whole(t, "y"), nil)
	w.Flush(5 * time.Second)
	if got := r.got(); !slices.Equal(got, append(want, "cancel y")) {
		t.Fatalf("after the end: %q", got)
	}
}

// Abort drops what the stream has not written — the frames queued and any sent later,
// whose last callback never runs — and leaves the other messages be.
func TestAbortDropsTheUnwrittenFrames(t *testing.T) {
	r := newRecorder(true)
	w := NewWriter(r, MaxRequestBytes, nil)
	stopped(t, w)
	w.Send(whole(t, "a"), nil)
	st := w.Open(append(append(body("s", "s1", false), body("s", "s2", false)...), body("s", "s3", false)...), nil)
	w.Send(chunked("m", "m1m2"), nil)
	// "cancel a" and "body s:s1" are let through; the writer takes m1 next, then s2.
	r.release(t, 2)
	st.Abort()
	var ran atomic.Bool
	st.Send(body("s", "s4", true), true, func() { ran.Store(true) })
	r.release(t, 2)
	w.Flush(5 * time.Second)
	if got, want := r.got(), []string{"cancel a", "body s:s1", "chunk m:m1", "chunk m:m2"}; !slices.Equal(got, want) {
		t.Fatalf("written:\n got %q\nwant %q", got, want)
	}
	if ran.Load() {
		t.Fatal("the last callback of an aborted stream ran")
	}
	if n := w.Queued(); n != 0 {
		t.Fatalf("%d messages still queued", n)
	}
}

// A frame of the stream already being written when it is aborted is finished whole (the
// peer never sees half a frame), and nothing after it is written.
func TestAbortFinishesTheFrameUnderWay(t *testing.T) {
	r := newRecorder(true)
	w := NewWriter(r, MaxRequestBytes, nil)
	stopped(t, w)
	st := w.Open(append(body("s", "s1", false), body("s", "s2", false)...), nil)
	select {
	case <-r.entered: // s1 is being written
	case <-time.After(5 * time.Second):
		t.Fatal("the stream's first frame was never written")
	}
	st.Abort()
	st.Send(body("s", "s3", true), true, nil)
	r.release(t, 1)
	w.Send(whole(t, "b"), nil)
	r.release(t, 1)
	w.Flush(5 * time.Second)
	if got, want := r.got(), []string{"body s:s1", "cancel b"}; !slices.Equal(got, want) {
		t.Fatalf("written:\n got %q\nwant %q", got, want)
	}
	// Aborting again, or a stream never given a frame, is harmless.
	st.Abort()
	idle := w.Open(nil, nil)
	idle.Abort()
	idle.Send(body("i", "i1", true), true, nil)
	w.Send(whole(t, "c"), nil)
	r.release(t, 1)
	w.Flush(5 * time.Second)
	if got := r.got(); !slices.Equal(got, []string{"body s:s1", "cancel b", "cancel c"}) {
		t.Fatalf("after aborting idle streams: %q", got)
	}
}

// Abort of a stream whose end was sent, while its final frame is being written (a gateway
// upload answered meanwhile does exactly this): the frame is written whole and its last
// callback runs — the writer read it when it took the frame (go test -race checks the
// access).
func TestAbortDuringTheFinalFrameKeepsItsCallback(t *testing.T) {
	r := newRecorder(true)
	w := NewWriter(r, MaxRequestBytes, nil)
	defer w.Stop()
	st := w.Open(nil, nil)
	ran := make(chan struct{}, 1)
	st.Send(body("s", "end", true), true, func() { ran <- struct{}{} })
	for deadline := time.Now().Add(5 * time.Second); w.Queued() != 0; runtime.Gosched() {
		if time.Now().After(deadline) {
			t.Fatal("the writer never took the final frame")
		}
	}
	st.Abort()
	r.release(t, 1)
	w.Flush(5 * time.Second)
	if len(ran) != 1 {
		t.Fatal("the final frame was written without its callback")
	}
	if got := r.got(); len(got) != 1 {
		t.Fatalf("written %q", got)
	}
}
