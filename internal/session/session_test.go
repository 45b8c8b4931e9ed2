package session

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/execplane/execplane/internal/protocol"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// peer is the helper's end of a session, scripted by each test: what a hostile or broken
// helper could send.
type peer struct {
	in  io.Reader      // what the client writes
	out *io.PipeWriter // what the client reads
	// toPeer is closed by the client's Close (its in); closing out ends the client's reads.
	toPeer *io.PipeReader
}

// pair returns a client-side stdin/stdout and the peer, with a cleanup that ends both.
func pair(t *testing.T) (io.WriteCloser, io.Reader, *peer, func()) {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	p := &peer{in: inR, out: outW, toPeer: inR}
	end := func() { outW.CloseWithError(io.EOF); inR.Close() }
	t.Cleanup(end)
	return inW, outR, p, end
}

func (p *peer) read(t *testing.T) *helperv1.SessionFrame {
	t.Helper()
	var f helperv1.SessionFrame
	if err := protocol.ReadFrame(p.in, &f, protocol.MaxRequestBytes); err != nil {
		t.Errorf("peer read: %v", err)
		return nil
	}
	return &f
}

func (p *peer) write(f *helperv1.Frame) { _ = protocol.WriteFrame(p.out, f, protocol.MaxResponseBytes) }

func (p *peer) raw(b []byte) { _, _ = p.out.Write(b) }

// handshake answers the hello as a correct helper would, with the given heartbeat.
func (p *peer) handshake(t *testing.T) {
	t.Helper()
	f := p.read(t)
	ready, err := protocol.Accept(f.GetHello())
	if err != nil {
		t.Errorf("hello: %v", err)
		return
	}
	p.write(&helperv1.Frame{Frame: &helperv1.Frame_Ready{Ready: ready}})
}

// beat sends heartbeats until stop closes.
func (p *peer) beat(every time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			p.write(&helperv1.Frame{Frame: &helperv1.Frame_Heartbeat{Heartbeat: &helperv1.Heartbeat{}}})
		}
	}
}

var testConfig = Config{Heartbeat: 100 * time.Millisecond, AbandonGrace: 500 * time.Millisecond}

// open opens a session with a peer that handshakes, then runs script.
func open(t *testing.T, cfg Config, script func(p *peer)) *Session {
	t.Helper()
	in, out, p, end := pair(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.handshake(t)
		if script != nil {
			script(p)
		}
	}()
	s, err := Open(context.Background(), cfg, in, out, end)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { s.Close(ReasonDrain); end(); <-done })
	return s
}

func readReq(path string) *helperv1.Request {
	return &helperv1.Request{Operation: &helperv1.Request_File{File: &executionv1.FileOperation{
		Operation: &executionv1.FileOperation_Read{Read: &executionv1.ReadFile{Path: []byte(path)}}}}}
}

func commandReq() *helperv1.Request {
	return &helperv1.Request{Operation: &helperv1.Request_Command{Command: &executionv1.CommandSpec{
		Program: &executionv1.CommandSpec_Shell{Shell: "sleep 100"}}}}
}

func fileAnswer(id string, content []byte) *helperv1.Frame {
	return &helperv1.Frame{Frame: &helperv1.Frame_Response{Response: &helperv1.Response{RequestId: id,
		Outcome: &helperv1.Response_File{File: &executionv1.FileResult{Result: &executionv1.FileResult_Read{Read: &executionv1.ReadFileResult{Content: content}}}}}}}
}

// awaitClosed waits for the session to close and returns why.
func awaitClosed(t *testing.T, s *Session, within time.Duration) Reason {
	t.Helper()
	select {
	case <-s.Done():
		return s.Reason()
	case <-time.After(within):
		t.Fatalf("the session did not close within %s", within)
		return ""
	}
}

func TestOpenRecognisesAHelperWithoutSessions(t *testing.T) {
	in, out, p, end := pair(t)
	go func() {
		var b [1]byte
		_, _ = p.in.Read(b[:]) // an old helper exits on the unknown flag: no frame at all
		p.out.CloseWithError(io.EOF)
		p.toPeer.Close()
	}()
	if _, err := Open(context.Background(), testConfig, in, out, end); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("want ErrUnsupported, got %v", err)
	}
}

func TestOpenRefusesAReadyThatRaisesABound(t *testing.T) {
	for name, edit := range map[string]func(r *helperv1.SessionReady){
		"max_in_flight": func(r *helperv1.SessionReady) { r.MaxInFlight = 1000 },
		"chunk_bytes":   func(r *helperv1.SessionReady) { r.ChunkBytes = protocol.MaxChunkBytes * 4 },
		"heartbeat":     func(r *helperv1.SessionReady) { r.HeartbeatMillis = 60_000 },
		"version":       func(r *helperv1.SessionReady) { r.Version = helperv1.ProtocolVersion_PROTOCOL_VERSION_1 },
	} {
		t.Run(name, func(t *testing.T) {
			in, out, p, end := pair(t)
			go func() {
				var f helperv1.SessionFrame
				_ = protocol.ReadFrame(p.in, &f, protocol.MaxRequestBytes)
				ready, _ := protocol.Accept(f.GetHello())
				edit(ready)
				p.write(&helperv1.Frame{Frame: &helperv1.Frame_Ready{Ready: ready}})
			}()
			if _, err := Open(context.Background(), testConfig, in, out, end); !errors.Is(err, ErrViolation) {
				t.Fatalf("want a violation, got %v", err)
			}
		})
	}
}

func TestAnswersInterleaveAndMatchTheirRequests(t *testing.T) {
	s := open(t, testConfig, func(p *peer) {
		// Two requests, answered in the reverse order.
		a, b := p.read(t), p.read(t)
		p.write(fileAnswer(b.GetRequest().GetRequestId(), []byte(b.GetRequest().GetFile().GetRead().GetPath())))
		p.write(fileAnswer(a.GetRequest().GetRequestId(), []byte(a.GetRequest().GetFile().GetRead().GetPath())))
		io.Copy(io.Discard, p.in) //nolint:errcheck // until the session ends
	})
	var wg sync.WaitGroup
	for _, path := range []string{"first", "second"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := s.Do(context.Background(), readReq(path), 1<<20)
			if err != nil || string(resp.GetFile().GetRead().GetContent()) != path {
				t.Errorf("%s: %v %v", path, resp, err)
			}
		}()
	}
	wg.Wait()
	if s.Served() != 2 {
		t.Fatalf("served %d", s.Served())
	}
}

// hostile answers one read request the way each case does; the session must close as a
// violation and the call must fail, never return what was sent.
func TestHostileAnswersCloseTheSession(t *testing.T) {
	chunk := func(id string, data []byte, last bool) *helperv1.Frame {
		return &helperv1.Frame{Frame: &helperv1.Frame_ResponseChunk{ResponseChunk: &helperv1.Chunk{RequestId: id, Data: data, Last: last}}}
	}
	encoded := func(f *helperv1.Frame) []byte { b, _ := protocol.Marshal(f.GetResponse()); return b }
	cases := []struct {
		name string
		// answer is what the peer sends for request id.
		answer func(p *peer, id string)
		// want is what the call gets: its own violation, or ErrLost (another frame broke
		// the session while it was in flight).
		want error
	}{
		{"an unknown id", func(p *peer, id string) { p.write(fileAnswer("x"+id, nil)) }, ErrLost},
		{"a second answer", func(p *peer, id string) { p.write(fileAnswer(id, nil)); p.write(fileAnswer(id, nil)) }, nil},
		{"garbage between frames", func(p *peer, id string) { p.raw([]byte("\x00\x00\x00\x03abc")) }, ErrLost},
		{"an oversized frame", func(p *peer, id string) {
			var h [4]byte
			binary.BigEndian.PutUint32(h[:], 1<<31) // refused before any allocation
			p.raw(h[:])
		}, ErrLost},
		{"a response over the call's cap", func(p *peer, id string) { p.write(fileAnswer(id, make([]byte, 2<<10))) }, ErrViolation},
		{"chunks over the call's cap", func(p *peer, id string) {
			for range 3 {
				p.write(chunk(id, make([]byte, 1<<10), false))
			}
		}, ErrViolation},
		{"chunks decoding as another id", func(p *peer, id string) { p.write(chunk(id, encoded(fileAnswer("other", nil)), true)) }, ErrViolation},
		{"chunks that do not decode", func(p *peer, id string) { p.write(chunk(id, []byte{0xff, 0xff}, true)) }, ErrViolation},
		{"a response inside a chunked one", func(p *peer, id string) { p.write(chunk(id, []byte{}, false)); p.write(fileAnswer(id, nil)) }, ErrViolation},
		{"a second ready", func(p *peer, id string) {
			p.write(&helperv1.Frame{Frame: &helperv1.Frame_Ready{Ready: &helperv1.SessionReady{}}})
		}, ErrLost},
		{"an empty frame", func(p *peer, id string) { p.write(&helperv1.Frame{}) }, ErrLost},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t, testConfig, func(p *peer) {
				f := p.read(t)
				tc.answer(p, f.GetRequest().GetRequestId())
				io.Copy(io.Discard, p.in) //nolint:errcheck // until the session ends
			})
			resp, err := s.Do(context.Background(), readReq("a"), 2<<10)
			if tc.want == nil {
				// The first answer was fine; the second broke the session.
				if err != nil {
					t.Fatalf("first answer: %v", err)
				}
			} else if !errors.Is(err, tc.want) || resp != nil {
				t.Fatalf("want %v, got %v / %v", tc.want, resp, err)
			}
			if r := awaitClosed(t, s, time.Second); r != ReasonViolation {
				t.Fatalf("closed as %q", r)
			}
			if _, err := s.Do(context.Background(), readReq("b"), 1<<20); !errors.Is(err, ErrNotSent) {
				t.Fatalf("a call on a closed session: %v", err)
			}
		})
	}
}

func TestAStreamThatNeverAnswersHonoursTheDeadlineThenCloses(t *testing.T) {
	stop := make(chan struct{})
	defer close(stop)
	s := open(t, testConfig, func(p *peer) {
		go p.beat(testConfig.Heartbeat/2, stop) // alive, but never answers
		io.Copy(io.Discard, p.in)               //nolint:errcheck // until the session ends
	})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := s.Do(ctx, readReq("a"), 1<<20)
	if !errors.Is(err, ErrLost) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want a lost call past its deadline, got %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("the deadline was not honoured: %s", d)
	}
	if r := awaitClosed(t, s, testConfig.AbandonGrace+time.Second); r != ReasonStuck {
		t.Fatalf("closed as %q", r)
	}
}

func TestASilentHelperClosesTheSession(t *testing.T) {
	s := open(t, testConfig, func(p *peer) { io.Copy(io.Discard, p.in) }) //nolint:errcheck // no heartbeat
	if r := awaitClosed(t, s, protocol.SilenceFactor*testConfig.Heartbeat+time.Second); r != ReasonSilent {
		t.Fatalf("closed as %q", r)
	}
}

func TestCancelReachesTheHelperAndTheCallReturns(t *testing.T) {
	cancels := make(chan string, 1)
	received := make(chan struct{})
	s := open(t, testConfig, func(p *peer) {
		req := p.read(t)
		close(received)
		c := p.read(t)
		cancels <- c.GetCancel().GetRequestId()
		// The answer comes after the caller left: accepted, and dropped.
		p.write(&helperv1.Frame{Frame: &helperv1.Frame_Response{Response: &helperv1.Response{RequestId: req.GetRequest().GetRequestId(),
			Outcome: &helperv1.Response_Command{Command: &executionv1.CommandResult{}}}}})
		next := p.read(t)
		p.write(fileAnswer(next.GetRequest().GetRequestId(), []byte("next")))
		io.Copy(io.Discard, p.in) //nolint:errcheck // until the session ends
	})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-received; cancel() }()
	if _, err := s.Do(ctx, commandReq(), 1<<20); !errors.Is(err, ErrLost) {
		t.Fatalf("a cancelled command: %v", err)
	}
	if id := <-cancels; id != "1" {
		t.Fatalf("cancel for %q", id)
	}
	// The late answer broke nothing: the session serves the next call.
	resp, err := s.Do(context.Background(), readReq("next"), 1<<20)
	if err != nil || string(resp.GetFile().GetRead().GetContent()) != "next" {
		t.Fatalf("after a cancel: %v %v (closed as %q)", resp, err, s.Reason())
	}
}

func TestLargeRequestsAreChunkedAndDoNotHoldSmallOnes(t *testing.T) {
	cfg := testConfig
	cfg.ChunkBytes = protocol.MinChunkBytes
	big := bytes.Repeat([]byte("x"), 20*protocol.MinChunkBytes)
	order := make(chan []string, 1)
	firstChunk, gate := make(chan struct{}), make(chan struct{})
	s := open(t, cfg, func(p *peer) {
		var seen []string
		var assembly *protocol.Assembly
		for len(seen) < 2 {
			f := p.read(t)
			switch fr := f.GetFrame().(type) {
			case *helperv1.SessionFrame_Request:
				seen = append(seen, "small")
				p.write(fileAnswer(fr.Request.GetRequestId(), nil))
			case *helperv1.SessionFrame_RequestChunk:
				if assembly == nil {
					// Stop reading after the first chunk until the small request waits.
					close(firstChunk)
					<-gate
					assembly = protocol.NewAssembly(protocol.MaxRequestBytes)
				}
				_ = assembly.Add(fr.RequestChunk.GetData())
				if fr.RequestChunk.GetLast() {
					var req helperv1.Request
					if err := assembly.Decode(&req); err != nil || !bytes.Equal(req.GetFile().GetWrite().GetContent(), big) {
						t.Errorf("reassembled request: %v", err)
					}
					seen = append(seen, "big")
					p.write(fileAnswer(fr.RequestChunk.GetRequestId(), nil))
				}
			default:
				return
			}
		}
		order <- seen
		io.Copy(io.Discard, p.in) //nolint:errcheck // until the session ends
	})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		_, err := s.Do(context.Background(), &helperv1.Request{Operation: &helperv1.Request_File{File: &executionv1.FileOperation{
			Operation: &executionv1.FileOperation_Write{Write: &executionv1.WriteFile{Path: []byte("big"), Content: big}}}}}, 1<<20)
		if err != nil {
			t.Error(err)
		}
	}()
	<-firstChunk
	go func() {
		defer wg.Done()
		if _, err := s.Do(context.Background(), readReq("small"), 1<<20); err != nil {
			t.Error(err)
		}
	}()
	// The rest of the large request and the small one both wait for the writer.
	for deadline := time.Now().Add(5 * time.Second); s.w.Queued() < 2; {
		if time.Now().After(deadline) {
			t.Fatal("the small request was never queued")
		}
		runtime.Gosched()
	}
	close(gate)
	wg.Wait()
	if got := <-order; got[0] != "small" {
		t.Fatalf("the small request waited behind the large one: %v", got)
	}
}

func TestCloseFailsOnlyInFlightCallsHonestly(t *testing.T) {
	cfg := testConfig
	cfg.ChunkBytes = protocol.MinChunkBytes
	// The peer reads the handshake and one frame, then stops reading: the stream backs up.
	read := make(chan struct{})
	s := open(t, cfg, func(p *peer) { p.read(t); close(read) })
	first := make(chan error, 1)
	go func() { _, err := s.Do(context.Background(), readReq("sent"), 1<<20); first <- err }()
	<-read
	// This one's chunks cannot all be written: the peer stopped reading.
	second := make(chan error, 1)
	go func() {
		_, err := s.Do(context.Background(), &helperv1.Request{Operation: &helperv1.Request_File{File: &executionv1.FileOperation{
			Operation: &executionv1.FileOperation_Write{Write: &executionv1.WriteFile{Path: []byte("big"), Content: make([]byte, 8*protocol.MinChunkBytes)}}}}}, 1<<20)
		second <- err
	}()
	for deadline := time.Now().Add(5 * time.Second); ; runtime.Gosched() {
		s.mu.Lock()
		n := len(s.calls)
		s.mu.Unlock()
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the second call never started")
		}
	}
	s.Close(ReasonView)
	if err := <-first; !errors.Is(err, ErrLost) {
		t.Fatalf("a call whose request was sent: %v", err)
	}
	if err := <-second; !errors.Is(err, ErrNotSent) {
		t.Fatalf("a call whose request was never whole on the stream: %v", err)
	}
}

// TestIdleSessionCost measures what an idle session holds on the client side and bounds it
// (the gateway's share of "1,000 sessions on one gateway"; bench/gateway measures the whole).
func TestIdleSessionCost(t *testing.T) {
	const n = 200
	stop := make(chan struct{})
	var peers sync.WaitGroup
	before := runtime.NumGoroutine()
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	sessions := make([]*Session, 0, n)
	for range n {
		in, out, p, end := pair(t)
		peers.Add(1)
		go func() { defer peers.Done(); p.handshake(t); <-stop }()
		s, err := Open(context.Background(), Config{Heartbeat: time.Minute}, in, out, end)
		if err != nil {
			t.Fatal(err)
		}
		sessions = append(sessions, s)
	}
	runtime.GC()
	runtime.ReadMemStats(&m1)
	perGoroutines := float64(runtime.NumGoroutine()-before-n) / n // minus each peer's own
	perHeap := float64(m1.HeapAlloc-m0.HeapAlloc) / n
	t.Logf("an idle session holds %.1f goroutines and %.0f bytes of heap on the client side", perGoroutines, perHeap)
	if perGoroutines > 3 || perHeap > 64<<10 {
		t.Fatalf("an idle session costs %.1f goroutines and %.0f bytes", perGoroutines, perHeap)
	}
	close(stop)
	for _, s := range sessions {
		s.Close(ReasonDrain)
	}
	peers.Wait()
}

// A helper that seals records speaks version 3 and is given the record keys; one of an
// older release (version 2 only) is given none — a field it does not know would end the
// session — and what it answers of commands is marked unverified.
func TestRecordKeysOnlyToAHelperThatSealsThem(t *testing.T) {
	durable := func() *helperv1.Request {
		return &helperv1.Request{Operation: &helperv1.Request_Durable{Durable: &helperv1.Durable{
			Op:         &helperv1.Durable_Status{Status: &helperv1.DurableStatus{CommandId: "c1"}},
			RecordKeys: []*helperv1.RecordKey{{Id: "k1", Key: make([]byte, protocol.RecordKeyBytes)}}, GrantGeneration: 4,
		}}}
	}
	for _, older := range []bool{false, true} {
		got := make(chan *helperv1.Request, 1)
		in, out, p, end := pair(t)
		done := make(chan struct{})
		go func() {
			defer close(done)
			f := p.read(t)
			hello := f.GetHello()
			if older { // as a helper of the release before: it knows version 2 only
				hello.Versions = []helperv1.ProtocolVersion{helperv1.ProtocolVersion_PROTOCOL_VERSION_2}
			}
			ready, err := protocol.Accept(hello)
			if err != nil {
				t.Errorf("hello: %v", err)
				return
			}
			p.write(&helperv1.Frame{Frame: &helperv1.Frame_Ready{Ready: ready}})
			req := p.read(t).GetRequest()
			got <- req
			p.write(&helperv1.Frame{Frame: &helperv1.Frame_Response{Response: &helperv1.Response{RequestId: req.GetRequestId(),
				Outcome: &helperv1.Response_Durable{Durable: &helperv1.DurableResult{Commands: []*executionv1.CommandInfo{{CommandId: "c1"}}}}}}})
			io.Copy(io.Discard, p.in) //nolint:errcheck // until the session ends
		}()
		s, err := Open(context.Background(), testConfig, in, out, end)
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		resp, err := s.Do(context.Background(), durable(), 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		req := <-got
		keys := len(req.GetDurable().GetRecordKeys()) > 0 || req.GetDurable().GetGrantGeneration() > 0
		if keys == older || req.GetDurable().GetStatus().GetCommandId() != "c1" {
			t.Errorf("older %v: the helper was sent %v", older, req.GetDurable())
		}
		if unverified := resp.GetDurable().GetCommands()[0].GetUnverified(); unverified != older {
			t.Errorf("older %v: the answer's unverified mark is %v", older, unverified)
		}
		s.Close(ReasonDrain)
		end()
		<-done
	}
}

// A replay-only start goes to a helper of version 4; to one of an older release (3 at most)
// it is refused here, UNSUPPORTED_VERSION, and never sent — a field that helper does not
// know would end the session, and it would begin the command the caller asked only to
// replay — and the session goes on serving.
func TestReplayOnlyStartsOnlyToAHelperThatKnowsThem(t *testing.T) {
	replay := &helperv1.Request{Operation: &helperv1.Request_Durable{Durable: &helperv1.Durable{
		Op: &helperv1.Durable_Start{Start: &helperv1.DurableStart{CommandId: "c1", ReplayOnly: true, RunId: "r", Epoch: 1, Detached: true,
			Command: &executionv1.CommandSpec{Program: &executionv1.CommandSpec_Shell{Shell: "true"}}}},
	}}}
	status := &helperv1.Request{Operation: &helperv1.Request_Durable{Durable: &helperv1.Durable{
		Op: &helperv1.Durable_Status{Status: &helperv1.DurableStatus{CommandId: "c1"}},
	}}}
	for _, older := range []bool{false, true} {
		var sent []*helperv1.Request
		in, out, p, end := pair(t)
		done := make(chan struct{})
		go func() {
			defer close(done)
			hello := p.read(t).GetHello()
			if older { // as a helper of the release before: versions 3 and 2
				hello.Versions = []helperv1.ProtocolVersion{helperv1.ProtocolVersion_PROTOCOL_VERSION_3, helperv1.ProtocolVersion_PROTOCOL_VERSION_2}
			}
			ready, err := protocol.Accept(hello)
			if err != nil {
				t.Errorf("hello: %v", err)
				return
			}
			p.write(&helperv1.Frame{Frame: &helperv1.Frame_Ready{Ready: ready}})
			for {
				var f helperv1.SessionFrame
				if err := protocol.ReadFrame(p.in, &f, protocol.MaxRequestBytes); err != nil {
					return // the session ended
				}
				req := f.GetRequest()
				sent = append(sent, req)
				p.write(&helperv1.Frame{Frame: &helperv1.Frame_Response{Response: &helperv1.Response{RequestId: req.GetRequestId(),
					Outcome: &helperv1.Response_Durable{Durable: &helperv1.DurableResult{Commands: []*executionv1.CommandInfo{{CommandId: "c1"}}}}}}})
			}
		}()
		s, err := Open(context.Background(), testConfig, in, out, end)
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		resp, err := s.Do(context.Background(), replay, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if code := resp.GetError().GetCode(); older != (code == helperv1.ErrorCode_ERROR_CODE_UNSUPPORTED_VERSION) {
			t.Errorf("older %v: the replay answered %v", older, resp)
		}
		if _, err := s.Do(context.Background(), status, 1<<20); err != nil {
			t.Errorf("older %v: the session after the replay: %v", older, err)
		}
		s.Close(ReasonDrain)
		end()
		<-done
		var replays int
		for _, req := range sent {
			if req.GetDurable().GetStart().GetReplayOnly() {
				replays++
			}
		}
		if want := map[bool]int{false: 1, true: 0}[older]; replays != want || len(sent) != want+1 {
			t.Errorf("older %v: the helper was sent %d requests, %d of them replays; want %d replays", older, len(sent), replays, want)
		}
	}
}
