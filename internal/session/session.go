package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/execplane/execplane/internal/protocol"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// Errors of a session call. Every error of Do wraps exactly one of them, or the caller's
// context error when the call gave up before its request was sent.
var (
	// ErrUnsupported: the helper ended the stream before answering the hello — a helper
	// that does not know sessions exits on the unknown flag. Drive it one exec per operation.
	ErrUnsupported = errors.New("the helper does not speak sessions")
	// ErrNotSent: the session ended before the request was whole on the stream. The helper
	// acts only on a whole request, so nothing ran: retry on another session or exec.
	ErrNotSent = errors.New("the session ended before the request was sent: nothing ran")
	// ErrLost: the session ended, or the call gave up, after the request was sent and before
	// its answer: it may have run.
	ErrLost = errors.New("the session ended after the request was sent: the outcome is unknown")
	// ErrViolation: the answer to this request broke the protocol (protocol.ErrViolation).
	ErrViolation = protocol.ErrViolation
)

// Reason says why a session closed: a bounded set, safe as a metric label.
type Reason string

// Reasons.
const (
	ReasonIdle      Reason = "idle"      // unused for the idle bound
	ReasonView      Reason = "view"      // the environment's epoch, generation or UID moved
	ReasonPod       Reason = "pod"       // the environment's executor Pod changed
	ReasonDrain     Reason = "drain"     // the gateway is stopping
	ReasonViolation Reason = "violation" // the helper broke the protocol
	ReasonBroken    Reason = "broken"    // the stream ended or failed
	ReasonSilent    Reason = "silent"    // no frame, not even a heartbeat, for SilenceFactor intervals
	ReasonStuck     Reason = "stuck"     // a request given up on was not answered within the grace
	ReasonEvicted   Reason = "evicted"   // the pool held too many sessions
)

// Config bounds a session.
type Config struct {
	// MaxInFlight is the most requests on the session at once (protocol.DefaultMaxInFlight).
	MaxInFlight int
	// ChunkBytes is the chunk size asked for (protocol.DefaultChunkBytes).
	ChunkBytes int
	// Heartbeat is the helper's heartbeat interval asked for (protocol.DefaultSessionHeartbeat).
	Heartbeat time.Duration
	// AbandonGrace bounds how long a request whose caller gave up may stay unanswered
	// before the session is closed as stuck (DefaultAbandonGrace).
	AbandonGrace time.Duration
}

// closeGrace bounds how long a closed session's stream may take to end by itself (the
// helper's own shutdown takes at most 3 s) before it is cut.
const closeGrace = 5 * time.Second

// DefaultAbandonGrace: a cancelled command is killed and answered within about a second; a
// file operation is bounded and short. A helper that answers neither within this is stuck.
const DefaultAbandonGrace = 10 * time.Second

func (c Config) withDefaults() Config {
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = protocol.DefaultMaxInFlight
	}
	if c.ChunkBytes <= 0 {
		c.ChunkBytes = protocol.DefaultChunkBytes
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = protocol.DefaultSessionHeartbeat
	}
	if c.AbandonGrace <= 0 {
		c.AbandonGrace = DefaultAbandonGrace
	}
	return c
}

// Session is an open session to one helper. It is safe for concurrent use.
type Session struct {
	in       io.WriteCloser
	out      io.Reader
	end      func()
	ready    *helperv1.SessionReady
	chunk    int
	frameCap int
	grace    time.Duration
	slots    chan struct{}
	w        *protocol.Writer

	readDone chan struct{} // closed when the reader has stopped: the stream's output ended

	mu     sync.Mutex
	calls  map[string]*call
	nextID uint64
	reason Reason
	done   chan struct{}
	heard  atomic.Int64 // unix nanoseconds of the last frame read
	used   atomic.Int64 // unix nanoseconds of the last call's start or end
	served atomic.Uint64
}

// call is one request in flight.
type call struct {
	id        string
	cap       int
	sent      atomic.Bool // the request, with its body if any, is whole on the stream
	abandoned time.Time   // zero while the caller waits
	assembly  *protocol.Assembly
	answer    chan answer // buffered 1
	// download is a read's content as it arrives (Transfer.Download), nil otherwise.
	download *pipe
	// upload: a write's body goes beside the call, and its slot is freed by the second of
	// the answer and the body's end (Session.release).
	upload    bool
	requested atomic.Bool // an upload's request frames are out (its body may follow)
	releases  atomic.Int32
}

type answer struct {
	resp *helperv1.Response
	err  error
}

// Open begins a session on a helper started with --session: in is its stdin, out its
// stdout, and end tears the stream down (close in and end are both called when the session
// closes). It writes the hello and waits, under ctx, for the helper's ready.
func Open(ctx context.Context, cfg Config, in io.WriteCloser, out io.Reader, end func()) (*Session, error) {
	cfg = cfg.withDefaults()
	hello := protocol.NewHello(cfg.MaxInFlight, cfg.ChunkBytes, cfg.Heartbeat)
	fail := func(err error) (*Session, error) { in.Close(); end(); return nil, err }
	type first struct {
		f   *helperv1.Frame
		err error
	}
	// The hello is written beside the read: a helper that does not know sessions exits
	// without reading it, and only the read tells that apart from a broken stream.
	go func() { _ = protocol.WriteFrame(in, hello, protocol.MaxRequestBytes) }()
	got := make(chan first, 1)
	go func() {
		var f helperv1.Frame
		err := protocol.ReadFrame(out, &f, protocol.SessionFrameCap(cfg.ChunkBytes))
		got <- first{&f, err}
	}()
	var r first
	select {
	case r = <-got:
	case <-ctx.Done():
		return fail(ctx.Err())
	}
	switch {
	case errors.Is(r.err, io.EOF):
		return fail(ErrUnsupported)
	case r.err != nil:
		return fail(fmt.Errorf("%w: %v", ErrViolation, r.err))
	case r.f.GetResponse().GetError().GetCode() == helperv1.ErrorCode_ERROR_CODE_UNSUPPORTED_VERSION:
		return fail(ErrUnsupported)
	case r.f.GetReady() == nil:
		return fail(fmt.Errorf("%w: the first frame is not a ready", ErrViolation))
	}
	ready := r.f.GetReady()
	if err := protocol.CheckReady(hello.GetHello(), ready); err != nil {
		return fail(err)
	}
	s := &Session{
		in: in, out: out, end: end, ready: ready,
		chunk: int(ready.GetChunkBytes()), frameCap: protocol.SessionFrameCap(int(ready.GetChunkBytes())),
		grace: cfg.AbandonGrace, slots: make(chan struct{}, ready.GetMaxInFlight()),
		calls: map[string]*call{}, done: make(chan struct{}), readDone: make(chan struct{}),
	}
	now := time.Now().UnixNano()
	s.heard.Store(now)
	s.used.Store(now)
	s.w = protocol.NewWriter(in, s.frameCap, func() { s.Close(ReasonBroken) })
	go s.read()
	go s.watch(time.Duration(ready.GetHeartbeatMillis()) * time.Millisecond)
	return s, nil
}

// Do sends req (its version and request id are the session's to set) and returns the
// helper's response, reading at most responseCap bytes for it. Errors wrap ErrNotSent,
// ErrLost, ErrViolation, or the caller's context error before anything was sent.
func (s *Session) Do(ctx context.Context, req *helperv1.Request, responseCap int) (*helperv1.Response, error) {
	if req.GetDurable().GetStart().GetReplayOnly() && !protocol.ReplaysOnly(s.ready) {
		// A helper before version 4 does not know the field: sent, it would end the session
		// (an unknown field is a violation). Refused here, as a helper refuses a version it
		// does not speak; nothing was sent, nothing ran.
		return &helperv1.Response{RequestId: req.GetRequestId(), Outcome: &helperv1.Response_Error{Error: &helperv1.Error{
			Code:    helperv1.ErrorCode_ERROR_CODE_UNSUPPORTED_VERSION,
			Message: "the helper's session version has no replay-only starts",
		}}}, nil
	}
	c, req, frames, err := s.begin(ctx, req, responseCap, nil)
	if err != nil {
		return nil, err
	}
	s.w.Send(frames, func() { c.sent.Store(true) })
	select {
	case a := <-c.answer:
		s.used.Store(time.Now().UnixNano())
		return s.unsealed(a.resp), a.err
	case <-ctx.Done():
		if !s.abandon(c) { // answered meanwhile
			a := <-c.answer
			return s.unsealed(a.resp), a.err
		}
		if req.GetCommand() != nil {
			s.cancel(c.id)
		}
		if c.sent.Load() {
			return nil, fmt.Errorf("%w: %w", ErrLost, ctx.Err())
		}
		return nil, ctx.Err()
	}
}

// envelope is a new request around the caller's operation, of the session's version: its
// content (up to the file cap) is shared, not copied. A helper that does not seal records
// (version 2) is given no record keys — a field it does not know would end the session.
func (s *Session) envelope(id string, req *helperv1.Request) *helperv1.Request {
	op := req.GetOperation()
	if d := req.GetDurable(); d != nil && !protocol.SealsRecords(s.ready) && (len(d.GetRecordKeys()) > 0 || d.GetGrantGeneration() > 0) {
		op = &helperv1.Request_Durable{Durable: &helperv1.Durable{Op: d.Op}}
	}
	return &helperv1.Request{
		Version: s.ready.GetVersion(), RequestId: id, Limits: req.GetLimits(), Operation: op,
		BodyBytes: req.GetBodyBytes(), BodyResponse: req.GetBodyResponse(),
	}
}

// unsealed marks what a helper that does not seal records says of commands as unverified:
// it wrote them unsealed, and knows no such mark.
func (s *Session) unsealed(resp *helperv1.Response) *helperv1.Response {
	if protocol.SealsRecords(s.ready) {
		return resp
	}
	for _, c := range resp.GetDurable().GetCommands() {
		c.Unverified = true
	}
	return resp
}

// begin takes a slot, registers the call (init, when not nil, sets it up before the reader
// can look it up) and encodes its request under the call's id; it frees what it took on
// failure.
func (s *Session) begin(ctx context.Context, req *helperv1.Request, responseCap int, init func(*call)) (*call, *helperv1.Request, []protocol.Encoded, error) {
	select {
	case s.slots <- struct{}{}:
	case <-s.done:
		return nil, nil, nil, ErrNotSent
	case <-ctx.Done():
		return nil, nil, nil, ctx.Err()
	}
	s.used.Store(time.Now().UnixNano())
	c, err := s.register(responseCap, init)
	if err != nil {
		<-s.slots
		return nil, nil, nil, err
	}
	req = s.envelope(c.id, req)
	frames, err := s.requestFrames(req)
	if err != nil {
		s.forget(c)
		return nil, nil, nil, err
	}
	return c, req, frames, nil
}

// register allocates the next request id for a call.
func (s *Session) register(responseCap int, init func(*call)) (*call, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reason != "" {
		return nil, ErrNotSent
	}
	s.nextID++
	c := &call{id: strconv.FormatUint(s.nextID, 10), cap: responseCap, answer: make(chan answer, 1)}
	if init != nil {
		init(c)
	}
	s.calls[c.id] = c
	return c, nil
}

// forget drops a call that was never sent.
func (s *Session) forget(c *call) {
	s.mu.Lock()
	if _, ok := s.calls[c.id]; ok {
		delete(s.calls, c.id)
		<-s.slots
	}
	s.mu.Unlock()
}

// requestFrames encodes req as one frame, or as chunks when it is larger than a chunk.
func (s *Session) requestFrames(req *helperv1.Request) ([]protocol.Encoded, error) {
	frame := &helperv1.SessionFrame{Frame: &helperv1.SessionFrame_Request{Request: req}}
	if proto.Size(frame) <= s.chunk {
		whole, err := protocol.Marshal(frame)
		return []protocol.Encoded{protocol.Whole(whole)}, err
	}
	payload, err := protocol.Marshal(req)
	if err != nil {
		return nil, err
	}
	if len(payload) > protocol.MaxRequestBytes {
		return nil, fmt.Errorf("%w: %d > %d bytes", protocol.ErrFrameTooLarge, len(payload), protocol.MaxRequestBytes)
	}
	return protocol.RequestChunks(req.GetRequestId(), payload, s.chunk), nil
}

// abandon marks a call its caller gave up on: its slot stays taken until the helper answers
// (or the session closes), and an answer is then dropped. It reports false when the
// answer has already arrived.
func (s *Session) abandon(c *call) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.calls[c.id]; !ok {
		return false
	}
	c.abandoned = time.Now()
	return true
}

// cancel asks the helper to end a request's command.
func (s *Session) cancel(id string) {
	frame, err := protocol.Marshal(&helperv1.SessionFrame{Frame: &helperv1.SessionFrame_Cancel{Cancel: &helperv1.Cancel{RequestId: id}}})
	if err == nil {
		s.w.Send([]protocol.Encoded{protocol.Whole(frame)}, nil)
	}
}

// watch closes the session when the helper falls silent or leaves a request it was told
// to give up unanswered past the grace.
func (s *Session) watch(heartbeat time.Duration) {
	t := time.NewTicker(heartbeat)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
		}
		if time.Since(time.Unix(0, s.heard.Load())) > protocol.SilenceFactor*heartbeat {
			s.Close(ReasonSilent)
			return
		}
		if s.stuck() {
			s.Close(ReasonStuck)
			return
		}
	}
}

func (s *Session) stuck() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.calls {
		if !c.abandoned.IsZero() && time.Since(c.abandoned) > s.grace {
			return true
		}
	}
	return false
}

// Close ends the session once, for reason: the helper's stdin ends (it kills everything it
// started and exits, which ends the stream), and the stream is torn down — at once when the
// helper broke the protocol or fell silent, else after it ended or closeGrace passed. Calls still waiting fail: ErrNotSent when their
// request never became whole on the stream, ErrLost otherwise.
func (s *Session) Close(reason Reason) {
	s.mu.Lock()
	if s.reason != "" {
		s.mu.Unlock()
		return
	}
	s.reason = reason
	close(s.done)
	calls := s.calls
	s.calls = map[string]*call{}
	s.mu.Unlock()
	s.w.Stop()
	s.in.Close()
	switch reason {
	case ReasonViolation, ReasonSilent, ReasonStuck, ReasonBroken:
		// Not to be trusted to end by itself, or ended already.
		s.end()
	case ReasonIdle:
		// Nothing written for the idle bound: client-go's WebSocket transport sends stdin's
		// end with the write deadline of the last write (a minute), past by now, and the
		// failed write poisons the connection's writes (its pings fail until it ends). The
		// helper would not see the end: the stream is cut, which ends its stdin all the same.
		s.end()
	default:
		// The helper ends the stream itself once it has seen stdin end and killed what it
		// ran: a clean end, no connection cut under the transport's feet. One that does
		// not within the grace is cut.
		go func() {
			t := time.NewTimer(closeGrace)
			defer t.Stop()
			select {
			case <-s.readDone:
			case <-t.C:
			}
			s.end()
		}()
	}
	for _, c := range calls {
		err := ErrNotSent
		if c.sent.Load() {
			err = fmt.Errorf("%w (the session closed: %s)", ErrLost, reason)
		}
		c.answer <- answer{err: err}
	}
}

// Done is closed when the session has closed.
func (s *Session) Done() <-chan struct{} { return s.done }

// Reason is why the session closed, empty while it is open.
func (s *Session) Reason() Reason {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reason
}

// Idle reports whether no call is in flight and none started or ended within d.
func (s *Session) Idle(d time.Duration) bool {
	s.mu.Lock()
	n := len(s.calls)
	s.mu.Unlock()
	return n == 0 && time.Since(time.Unix(0, s.used.Load())) > d
}

// LastUsed is when the last call started or ended.
func (s *Session) LastUsed() time.Time { return time.Unix(0, s.used.Load()) }

// Served counts the requests answered on the session.
func (s *Session) Served() uint64 { return s.served.Load() }
