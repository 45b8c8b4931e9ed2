package session

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/execplane/execplane/internal/protocol"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// bodyConfig: two slots, so that a slot lost or freed twice shows, and heartbeats rare
// enough that a scripted peer never has to send one.
var bodyConfig = Config{MaxInFlight: 2, Heartbeat: 10 * time.Second, AbandonGrace: 5 * time.Second}

func bodyFrame(id string, data []byte, last bool) *helperv1.Frame {
	return &helperv1.Frame{Frame: &helperv1.Frame_Body{Body: &helperv1.Chunk{RequestId: id, Data: data, Last: last}}}
}

func errorAnswer(id string, code helperv1.ErrorCode) *helperv1.Frame {
	return &helperv1.Frame{Frame: &helperv1.Frame_Response{Response: &helperv1.Response{RequestId: id,
		Outcome: &helperv1.Response_Error{Error: &helperv1.Error{Code: code, Message: "refused"}}}}}
}

func bodyReadReq(path string) *helperv1.Request {
	r := readReq(path)
	r.BodyResponse = true
	return r
}

func bodyWriteReq(path string, size int) *helperv1.Request {
	return &helperv1.Request{BodyBytes: uint64(size), Operation: &helperv1.Request_File{File: &executionv1.FileOperation{
		Operation: &executionv1.FileOperation_Write{Write: &executionv1.WriteFile{Path: []byte(path), Mode: executionv1.WriteMode_WRITE_MODE_CREATE_ONLY}}}}}
}

// collect is a Download that keeps the pieces it is handed, in order.
type collect struct {
	mu     sync.Mutex
	pieces []string
	first  chan struct{} // closed on the first piece
	once   sync.Once
}

func newCollect() *collect { return &collect{first: make(chan struct{})} }

func (c *collect) take(b []byte) error {
	c.mu.Lock()
	c.pieces = append(c.pieces, string(b))
	c.mu.Unlock()
	c.once.Do(func() { close(c.first) })
	return nil
}

func (c *collect) got() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.pieces...)
}

// A read's body that breaks the protocol fails the call as a violation — never handing
// over a response — and closes the session as one.
func TestHostileBodiesCloseTheSession(t *testing.T) {
	chunk := func(id string, data []byte, last bool) *helperv1.Frame {
		return &helperv1.Frame{Frame: &helperv1.Frame_ResponseChunk{ResponseChunk: &helperv1.Chunk{RequestId: id, Data: data, Last: last}}}
	}
	const responseCap = 2 << 10
	cases := []struct {
		name string
		// plain sends the read with Do, taking no body; else with Stream and a Download.
		plain  bool
		answer func(p *peer, id string)
	}{
		{"a body for a request that takes none", true, func(p *peer, id string) {
			p.write(bodyFrame(id, []byte("x"), true))
			p.write(fileAnswer(id, nil))
		}},
		{"a response before the body's last frame", false, func(p *peer, id string) {
			p.write(bodyFrame(id, []byte("ab"), false))
			p.write(fileAnswer(id, nil))
		}},
		{"a response without the body", false, func(p *peer, id string) { p.write(fileAnswer(id, nil)) }},
		{"an error after a piece of the body", false, func(p *peer, id string) {
			p.write(bodyFrame(id, []byte("ab"), false))
			p.write(errorAnswer(id, helperv1.ErrorCode_ERROR_CODE_INTERNAL))
		}},
		{"a body piece after its end", false, func(p *peer, id string) {
			p.write(bodyFrame(id, []byte("ab"), true))
			p.write(bodyFrame(id, []byte("cd"), true))
			p.write(fileAnswer(id, nil))
		}},
		{"body pieces over the call's response cap", false, func(p *peer, id string) {
			for range 3 {
				p.write(bodyFrame(id, make([]byte, 1<<10), false))
			}
			p.write(bodyFrame(id, nil, true))
			p.write(fileAnswer(id, nil))
		}},
		{"a body inside a chunked response", false, func(p *peer, id string) {
			p.write(chunk(id, []byte{}, false))
			p.write(bodyFrame(id, []byte("ab"), true))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t, bodyConfig, func(p *peer) {
				f := p.read(t)
				tc.answer(p, f.GetRequest().GetRequestId())
				io.Copy(io.Discard, p.in) //nolint:errcheck // until the session ends
			})
			var resp *helperv1.Response
			var err error
			c := newCollect()
			if tc.plain {
				resp, err = s.Do(context.Background(), readReq("a"), responseCap)
			} else {
				resp, err = s.Stream(context.Background(), bodyReadReq("a"), responseCap, Transfer{Download: c.take})
			}
			if !errors.Is(err, ErrViolation) || resp != nil {
				t.Fatalf("want this call's violation, got %v / %v", resp, err)
			}
			if r := awaitClosed(t, s, 5*time.Second); r != ReasonViolation {
				t.Fatalf("closed as %q", r)
			}
			n := 0
			for _, p := range c.got() {
				n += len(p)
			}
			if n > responseCap {
				t.Fatalf("the Download was handed %d bytes, over the cap of %d", n, responseCap)
			}
		})
	}
}

// A read refused without a body is an answer, not a violation: the caller gets the error
// response, the Download nothing, and the session goes on.
func TestAnErrorInsteadOfABodyIsTheAnswer(t *testing.T) {
	s := open(t, bodyConfig, func(p *peer) {
		f := p.read(t)
		p.write(errorAnswer(f.GetRequest().GetRequestId(), helperv1.ErrorCode_ERROR_CODE_NOT_FOUND))
		f = p.read(t)
		p.write(fileAnswer(f.GetRequest().GetRequestId(), []byte("next")))
		io.Copy(io.Discard, p.in) //nolint:errcheck // until the session ends
	})
	c := newCollect()
	resp, err := s.Stream(context.Background(), bodyReadReq("missing"), 1<<20, Transfer{Download: c.take})
	if err != nil || resp.GetError().GetCode() != helperv1.ErrorCode_ERROR_CODE_NOT_FOUND {
		t.Fatalf("want the NOT_FOUND response, got %v / %v", resp, err)
	}
	if got := c.got(); len(got) != 0 {
		t.Fatalf("the Download was handed %q", got)
	}
	resp, err = s.Do(context.Background(), readReq("next"), 1<<20)
	if err != nil || string(resp.GetFile().GetRead().GetContent()) != "next" {
		t.Fatalf("the next call: %v / %v (closed as %q)", resp, err, s.Reason())
	}
}

// A body in several frames reaches the Download in order, as it arrives — the first piece
// before the helper has sent the rest — and the call returns the response after it.
func TestABodyReachesTheDownloadInOrderAsItArrives(t *testing.T) {
	for name, pieces := range map[string][]string{
		"several pieces": {"ab", "cd", "ef"},
		"empty":          {""},
	} {
		t.Run(name, func(t *testing.T) {
			c := newCollect()
			s := open(t, bodyConfig, func(p *peer) {
				f := p.read(t)
				id := f.GetRequest().GetRequestId()
				if !f.GetRequest().GetBodyResponse() {
					t.Errorf("the request does not ask for a body: %v", f)
				}
				for i, piece := range pieces {
					p.write(bodyFrame(id, []byte(piece), i == len(pieces)-1))
					if i == 0 && piece != "" {
						select {
						case <-c.first: // the caller has it before the rest is sent
						case <-time.After(5 * time.Second):
							t.Errorf("the first piece was not handed over as it arrived")
						}
					}
				}
				p.write(fileAnswer(id, nil))
				io.Copy(io.Discard, p.in) //nolint:errcheck // until the session ends
			})
			resp, err := s.Stream(context.Background(), bodyReadReq("a"), 1<<20, Transfer{Download: c.take})
			if err != nil || resp.GetFile().GetRead() == nil {
				t.Fatalf("want the read's response, got %v / %v", resp, err)
			}
			var want []string
			for _, p := range pieces {
				if p != "" {
					want = append(want, p)
				}
			}
			if got := c.got(); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("the Download was handed %q, want %q", got, want)
			}
			if s.Reason() != "" || s.Served() != 1 {
				t.Fatalf("closed as %q, served %d", s.Reason(), s.Served())
			}
		})
	}
}

// streamWithin runs s.Stream, failing the test when the call does not return promptly.
func streamWithin(t *testing.T, s *Session, ctx context.Context, req *helperv1.Request, tr Transfer) (*helperv1.Response, error) {
	t.Helper()
	type result struct {
		resp *helperv1.Response
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := s.Stream(ctx, req, 1<<20, tr)
		done <- result{resp, err}
	}()
	select {
	case r := <-done:
		return r.resp, r.err
	case <-time.After(5 * time.Second):
		t.Fatal("the call did not return within 5s")
		return nil, nil
	}
}

// serveReads answers total read requests in batches: it holds each batch of requests
// unanswered until it has all of them, so that it gets through only if the client really
// has that many slots. Any other frame is an error.
func serveReads(t *testing.T, p *peer, batch, total int) {
	for answered := 0; answered < total; {
		var held []*helperv1.Request
		for len(held) < batch {
			f := p.read(t)
			if f == nil {
				return
			}
			if f.GetRequest() == nil {
				t.Errorf("a frame other than a request: %v", f)
				return
			}
			held = append(held, f.GetRequest())
		}
		for _, r := range held {
			p.write(fileAnswer(r.GetRequestId(), r.GetFile().GetRead().GetPath()))
		}
		answered += len(held)
	}
}

// followUps runs n reads at once on s and requires every one to succeed: with the peer
// answering in batches of the session's slots, a slot lost by an earlier call hangs them
// (past the deadline), and a slot freed twice blocks a release for good.
func followUps(t *testing.T, s *Session, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("f%d", i)
			resp, err := s.Do(ctx, readReq(name), 1<<20)
			if err == nil && string(resp.GetFile().GetRead().GetContent()) != name {
				err = fmt.Errorf("%s read back %q", name, resp.GetFile().GetRead().GetContent())
			}
			errs <- err
		}()
	}
	all := make(chan struct{})
	go func() { wg.Wait(); close(all) }()
	select {
	case <-all:
	case <-time.After(15 * time.Second):
		t.Fatalf("the follow-up calls hang (closed as %q)", s.Reason())
	}
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a follow-up call: %v (closed as %q)", err, s.Reason())
		}
	}
	if n := len(s.slots); n != 0 {
		t.Fatalf("%d slots still taken after every call returned", n)
	}
}

// An upload the helper answers — refuses — while its body is still coming returns that
// answer at once, without waiting for the caller's next piece; the rest of the body is not
// sent and the helper is told, by a Cancel, that it ended; its slot is freed exactly once.
// Answered after the last body frame, the upload sends no Cancel.
func TestAnUploadAnsweredEarlyReturnsAndFreesItsSlotOnce(t *testing.T) {
	piece := bytes.Repeat([]byte("u"), 1<<10)
	const size = 8 << 10
	for _, early := range []bool{true, false} {
		t.Run(map[bool]string{true: "before the body ended", false: "after the body ended"}[early], func(t *testing.T) {
			n := 3 * bodyConfig.MaxInFlight
			cancelled := make(chan string, 1)
			s := open(t, bodyConfig, func(p *peer) {
				f := p.read(t)
				id := f.GetRequest().GetRequestId()
				if f.GetRequest().GetBodyBytes() != size {
					t.Errorf("the request announces %d bytes", f.GetRequest().GetBodyBytes())
				}
				got := 0
				for {
					f = p.read(t)
					b := f.GetBody()
					if b == nil || b.GetRequestId() != id {
						t.Errorf("want a body frame of %s, got %v", id, f)
						return
					}
					got += len(b.GetData())
					if early || b.GetLast() {
						break
					}
				}
				if !early && got != size {
					t.Errorf("the body ended after %d of %d bytes", got, size)
				}
				p.write(errorAnswer(id, helperv1.ErrorCode_ERROR_CODE_ALREADY_EXISTS))
				if early {
					// The rest of the body is not sent; a Cancel ends it.
					for {
						f := p.read(t)
						if b := f.GetBody(); b != nil && b.GetRequestId() == id && !b.GetLast() {
							continue // already on its way
						}
						cancelled <- f.GetCancel().GetRequestId()
						break
					}
				}
				serveReads(t, p, bodyConfig.MaxInFlight, n) // (a Cancel here is an error)
				io.Copy(io.Discard, p.in)                   //nolint:errcheck // until the session ends
			})
			hold := make(chan struct{})
			defer close(hold)
			var pulls atomic.Int32
			upload := func() ([]byte, error) {
				k := int(pulls.Add(1))
				switch {
				case early && k > 1:
					<-hold // the caller's next piece is still to come
					return nil, io.EOF
				case k > size/len(piece):
					return nil, io.EOF
				}
				return piece, nil
			}
			// (While Upload is still waiting for the caller's next piece, when early.)
			resp, err := streamWithin(t, s, context.Background(), bodyWriteReq("taken", size), Transfer{Upload: upload})
			if err != nil || resp.GetError().GetCode() != helperv1.ErrorCode_ERROR_CODE_ALREADY_EXISTS {
				t.Fatalf("want the helper's refusal, got %v / %v", resp, err)
			}
			if early {
				select {
				case id := <-cancelled:
					if id != "1" {
						t.Fatalf("a Cancel for %q, not the upload", id)
					}
				case <-time.After(5 * time.Second):
					t.Fatal("the helper was never told the body ended")
				}
			}
			if n := len(s.slots); n != 0 {
				t.Fatalf("the answered upload holds %d slots", n)
			}
			followUps(t, s, n)
			if s.Reason() != "" || s.Served() != uint64(1+n) {
				t.Fatalf("closed as %q, served %d", s.Reason(), s.Served())
			}
		})
	}
}

// An upload whose caller fails mid-body — its Upload errs, or its context ends — returns
// that error (not sent: the body never ended), the helper gets a Cancel, and the slot comes
// back once the helper answers the cancelled write.
func TestAnUploadFailingMidBodyCancelsIt(t *testing.T) {
	errGone := errors.New("the caller is gone")
	piece := bytes.Repeat([]byte("u"), 1<<10)
	for _, viaContext := range []bool{false, true} {
		t.Run(map[bool]string{false: "the Upload fails", true: "the context ends"}[viaContext], func(t *testing.T) {
			n := 3 * bodyConfig.MaxInFlight
			gotPiece := make(chan struct{})
			cancelled := make(chan string, 1)
			s := open(t, bodyConfig, func(p *peer) {
				f := p.read(t)
				id := f.GetRequest().GetRequestId()
				for {
					f = p.read(t)
					if b := f.GetBody(); b != nil && b.GetRequestId() == id && !b.GetLast() {
						if len(b.GetData()) > 0 {
							close(gotPiece)
						}
						continue
					}
					cancelled <- f.GetCancel().GetRequestId()
					break
				}
				// The helper answers the cancelled write; only then is its slot free.
				p.write(errorAnswer(id, helperv1.ErrorCode_ERROR_CODE_UNAVAILABLE))
				serveReads(t, p, bodyConfig.MaxInFlight, n)
				io.Copy(io.Discard, p.in) //nolint:errcheck // until the session ends
			})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			hold := make(chan struct{})
			defer close(hold)
			var pulls atomic.Int32
			upload := func() ([]byte, error) {
				if pulls.Add(1) == 1 {
					return piece, nil
				}
				if viaContext {
					<-hold
					return nil, io.EOF
				}
				<-gotPiece // the first piece went out before the failure
				return nil, errGone
			}
			if viaContext {
				go func() {
					select {
					case <-gotPiece:
						cancel()
					case <-hold:
					}
				}()
			}
			_, err := streamWithin(t, s, ctx, bodyWriteReq("f", 8<<10), Transfer{Upload: upload})
			switch {
			case viaContext && (!errors.Is(err, context.Canceled) || errors.Is(err, ErrLost)):
				t.Fatalf("want the context's error, not sent, got %v", err)
			case !viaContext && !errors.Is(err, errGone):
				t.Fatalf("want the Upload's error, got %v", err)
			}
			select {
			case id := <-cancelled:
				if id != "1" {
					t.Fatalf("a Cancel for %q, not the upload", id)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the helper was never told the body ended")
			}
			followUps(t, s, n)
			if s.Reason() != "" {
				t.Fatalf("closed as %q", s.Reason())
			}
		})
	}
}

// An upload that fails before any of it reached the stream — the writer busy with another
// call's frames, the caller's first piece already bad — is forgotten: the helper is sent
// neither it nor a Cancel, its slot is free at once, and the session is not closed as stuck
// when the abandon grace passes.
func TestAnUploadFailingBeforeItWasSentIsForgotten(t *testing.T) {
	cfg := bodyConfig
	cfg.AbandonGrace = 300 * time.Millisecond
	cfg.Heartbeat = 100 * time.Millisecond
	release := make(chan struct{})
	seen := make(chan *helperv1.SessionFrame, 64)
	stop := make(chan struct{})
	s := open(t, cfg, func(p *peer) {
		var mu sync.Mutex // one writer at a time on the peer's side
		write := func(f *helperv1.Frame) { mu.Lock(); p.write(f); mu.Unlock() }
		go func() {
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					write(&helperv1.Frame{Frame: &helperv1.Frame_Heartbeat{Heartbeat: &helperv1.Heartbeat{}}})
				}
			}
		}()
		<-release // the writer is stuck on the first call's frames until then
		for {
			var f helperv1.SessionFrame
			if protocol.ReadFrame(p.in, &f, protocol.MaxRequestBytes) != nil {
				return // the session ended
			}
			seen <- &f
			if r := f.GetRequest(); r != nil {
				write(fileAnswer(r.GetRequestId(), nil))
			}
		}
	})
	defer close(stop)
	// A large request the peer does not read yet holds the writer.
	big := readReq("big")
	big.GetFile().GetRead().Path = bytes.Repeat([]byte("p"), 3000)
	first := make(chan error, 1)
	go func() { _, err := s.Do(context.Background(), big, 1<<20); first <- err }()
	for deadline := time.Now().Add(5 * time.Second); ; {
		s.mu.Lock()
		writing := false
		for _, c := range s.calls {
			writing = c.sent.Load() // just before its frame is written, which blocks: the peer does not read
		}
		s.mu.Unlock()
		if writing {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first call never reached the stream")
		}
		runtime.Gosched()
	}
	bad := errors.New("the first piece is bad")
	_, err := streamWithin(t, s, context.Background(), bodyWriteReq("w", 10), Transfer{Upload: func() ([]byte, error) { return nil, bad }})
	if !errors.Is(err, bad) {
		t.Fatalf("want the Upload's error, got %v", err)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatalf("the first call: %v", err)
	}
	select {
	case <-s.Done():
		t.Fatalf("the session closed as %q", s.Reason())
	case <-time.After(3 * cfg.AbandonGrace):
	}
	close(seen)
	for f := range seen {
		if f.GetRequest().GetRequestId() != "1" || f.GetRequest().GetFile().GetRead() == nil {
			t.Fatalf("the helper was sent %v", f)
		}
	}
	if n := len(s.slots); n != 0 {
		t.Fatalf("%d slots still taken", n)
	}
}

// A helper that answers a write as done before its body was whole lies: a violation.
func TestAnUploadAnsweredAsDoneEarlyIsAViolation(t *testing.T) {
	s := open(t, bodyConfig, func(p *peer) {
		f := p.read(t)
		id := f.GetRequest().GetRequestId()
		p.write(&helperv1.Frame{Frame: &helperv1.Frame_Response{Response: &helperv1.Response{RequestId: id,
			Outcome: &helperv1.Response_File{File: &executionv1.FileResult{Result: &executionv1.FileResult_Write{Write: &executionv1.WriteFileResult{}}}}}}})
		io.Copy(io.Discard, p.in) //nolint:errcheck // until the session ends
	})
	hold := make(chan struct{})
	defer close(hold)
	_, err := streamWithin(t, s, context.Background(), bodyWriteReq("w", 10), Transfer{Upload: func() ([]byte, error) { <-hold; return nil, io.EOF }})
	if !errors.Is(err, ErrViolation) {
		t.Fatalf("want a violation, got %v", err)
	}
	if r := awaitClosed(t, s, time.Second); r != ReasonViolation {
		t.Fatalf("closed as %q", r)
	}
}
