package protocol

import (
	"io"
	"sync"
	"time"
)

// Writer is the one writer of a session's stream, at either end. Each Send is a message of
// one or more encoded frames; the writer takes one frame at a time from the queued
// messages round-robin, so a large message (many chunks) interleaves with small ones
// instead of holding them behind it. A failed write stops the writer: what is queued is
// dropped, later sends are dropped, and the failure callback runs once.
type Writer struct {
	w      io.Writer
	max    int
	failed func()

	mu      sync.Mutex
	cond    *sync.Cond // broadcast on every change of the fields below
	writing bool
	queue   []*message
	beating bool // a heartbeat is queued
	stopped bool
	broken  bool
}

// message is the encoded frames of one request or response, or a heartbeat.
type message struct {
	frames []Encoded
	// last runs just before the last frame is written: from then on the peer may have the
	// whole message.
	last      func()
	heartbeat bool
	// open: a Stream's message, more frames to come; parked: open with none waiting, so
	// out of the queue until some are appended.
	open, parked bool
	// opened runs just before the last of a Stream's first openFrames frames is written.
	opened     func()
	openFrames int
	// taken counts the frames taken to be written; ended: the final one was.
	taken int
	ended bool
}

// Stream is a message whose frames become known over time — a request followed by its
// body as the caller receives it. Its frames are written in order, in the same round-robin
// as whole messages.
type Stream struct {
	w *Writer
	m *message
}

// Open starts a Stream with its first frames (none is fine); opened, if not nil, runs just
// before the last of them is written.
func (s *Writer) Open(frames []Encoded, opened func()) *Stream {
	m := &message{frames: frames, open: true}
	if len(frames) > 0 {
		m.opened, m.openFrames = opened, len(frames)
	}
	s.mu.Lock()
	if len(frames) == 0 {
		m.parked = true
	} else if !s.stopped {
		s.queue = append(s.queue, m)
	}
	s.mu.Unlock()
	s.cond.Broadcast()
	return &Stream{w: s, m: m}
}

// Abort drops the frames of the stream not yet written and closes it (a frame being
// written is finished). It reports how many of its frames were taken to be written, and
// whether its final frame was: those reach the peer.
func (st *Stream) Abort() (taken int, ended bool) {
	s, m := st.w, st.m
	s.mu.Lock()
	m.frames, m.open, m.last, m.opened = nil, false, nil, nil
	if !m.parked {
		for i, q := range s.queue {
			if q == m {
				s.queue = append(s.queue[:i], s.queue[i+1:]...)
				break
			}
		}
	}
	m.parked = true
	taken, ended = m.taken, m.ended
	s.mu.Unlock()
	s.cond.Broadcast()
	return taken, ended
}

// Send appends frames to the stream; end closes it, and last, if not nil, then runs just
// before its final frame is written. A stream must end with at least one frame.
func (st *Stream) Send(frames []Encoded, end bool, last func()) {
	s, m := st.w, st.m
	s.mu.Lock()
	if !m.open || s.stopped {
		s.mu.Unlock()
		return
	}
	m.frames = append(m.frames, frames...)
	if end {
		m.open, m.last = false, last
	}
	if m.parked && len(m.frames) > 0 {
		m.parked = false
		s.queue = append(s.queue, m)
	}
	s.mu.Unlock()
	s.cond.Broadcast()
}

// NewWriter starts the writer of w; every frame is at most max bytes. failed, if not nil,
// runs once when a write fails.
func NewWriter(w io.Writer, max int, failed func()) *Writer {
	s := &Writer{w: w, max: max, failed: failed}
	s.cond = sync.NewCond(&s.mu)
	go s.run()
	return s
}

// Send queues one message's frames; last, if not nil, runs just before its last frame is
// written (never, when the writer stops first).
func (s *Writer) Send(frames []Encoded, last func()) {
	s.enqueue(&message{frames: frames, last: last})
}

// Heartbeat queues a heartbeat frame unless one is waiting already (a slow reader must not
// make them pile up).
func (s *Writer) Heartbeat(frame []byte) {
	s.enqueue(&message{frames: []Encoded{Whole(frame)}, heartbeat: true})
}

func (s *Writer) enqueue(m *message) {
	if len(m.frames) == 0 {
		return
	}
	s.mu.Lock()
	if !s.stopped && !(m.heartbeat && s.beating) {
		s.queue = append(s.queue, m)
		s.beating = s.beating || m.heartbeat
	}
	s.mu.Unlock()
	s.cond.Broadcast()
}

// Queued counts the messages waiting, in part or whole, to be written.
func (s *Writer) Queued() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue)
}

// Failed reports whether a write failed: the peer is gone.
func (s *Writer) Failed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.broken
}

// Stop drops what is queued and stops the writer after the write under way, if any; it
// does not wait for that write (a peer that stopped reading must not hold the caller: the
// caller ends the stream). It may be called more than once, and from the failure callback.
func (s *Writer) Stop() {
	s.mu.Lock()
	s.stopped = true
	s.queue = nil
	s.mu.Unlock()
	s.cond.Broadcast()
}

// Flush waits until everything queued has been written, or the writer stopped, for at most
// d.
func (s *Writer) Flush(d time.Duration) {
	timer := time.AfterFunc(d, s.cond.Broadcast)
	defer timer.Stop()
	deadline := time.Now().Add(d)
	s.mu.Lock()
	defer s.mu.Unlock()
	for (len(s.queue) > 0 || s.writing) && !s.stopped && time.Now().Before(deadline) {
		s.cond.Wait()
	}
}

func (s *Writer) run() {
	for {
		s.mu.Lock()
		for len(s.queue) == 0 && !s.stopped {
			s.cond.Wait()
		}
		if s.stopped {
			s.mu.Unlock()
			return
		}
		m := s.queue[0]
		s.queue = s.queue[1:]
		frame := m.frames[0]
		m.frames = m.frames[1:]
		var run []func() // read under the lock: Abort may clear them meanwhile
		m.taken++
		if len(m.frames) == 0 && !m.open {
			m.ended = true
			if m.last != nil {
				run = append(run, m.last)
			}
		}
		if m.opened != nil {
			if m.openFrames--; m.openFrames == 0 {
				run = append(run, m.opened)
				m.opened = nil
			}
		}
		switch {
		case len(m.frames) > 0:
			s.queue = append(s.queue, m) // to the back: round-robin
		case m.open:
			m.parked = true // until the stream has more
		case m.heartbeat:
			s.beating = false
		}
		s.writing = true
		s.mu.Unlock()
		for _, f := range run {
			f()
		}
		err := WriteEncoded(s.w, frame, s.max)
		s.mu.Lock()
		s.writing = false
		if err != nil {
			s.broken, s.stopped, s.queue = true, true, nil
		}
		s.mu.Unlock()
		s.cond.Broadcast()
		if err != nil {
			if s.failed != nil {
				s.failed()
			}
			return
		}
	}
}
