package helper

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/execplane/execplane/internal/failpoint"
	"github.com/execplane/execplane/internal/helper/fileops"
	"github.com/execplane/execplane/internal/helper/supervisor"
	"github.com/execplane/execplane/internal/protocol"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// Bounds of a session's end.
const (
	// helloFrameBytes bounds the first frame: a hello is a few dozen bytes.
	helloFrameBytes = 4 << 10
	// shutdownGrace bounds how long the session waits, once stdin has ended, for its
	// requests to finish: a cancelled command is killed and reaped within about a second
	// (process.maxReapTime), a file operation is short. What is left then is killed.
	shutdownGrace = 3 * time.Second
	// refusalFlush bounds the wait for the refusal that ends a session to be written.
	refusalFlush = time.Second
)

// session is one stream of many requests (protocol version 2, docs/sessions.md). File
// operations run in this process, one goroutine each; a command runs in a child helper
// serving that one request (child.go), so that it gets exactly the process guarantees of
// one exec per operation — its own working directory, subreaper and reaping — while other
// requests go on beside it.
type session struct {
	cfg      Config
	ready    *helperv1.SessionReady
	frameCap int
	out      *protocol.Writer
	children *children

	mu      sync.Mutex
	running map[string]*inFlight
	partial map[string]*protocol.Assembly
	wg      sync.WaitGroup
}

// inFlight is a request being served; cancel ends its command, or its write's body.
type inFlight struct {
	cancel func()
	// body is a write's content still to come (Request.body_bytes), nil otherwise. The
	// request id stays in use until the body ends, even once answered.
	body     *body
	answered bool
}

// ServeSession serves requests until stdin ends, then kills everything it started and
// returns. It returns an error only when the session could not begin (no hello).
func ServeSession(_ context.Context, cfg Config, stdin io.Reader, stdout io.Writer) error {
	// Until the session begins, one refusal is all the helper writes.
	refuse := func(r *helperv1.Response) error {
		return protocol.WritePayload(stdout, frameBytes(responseFrame(r)), protocol.MaxResponseBytes)
	}
	var first helperv1.SessionFrame
	if err := protocol.ReadFrame(stdin, &first, helloFrameBytes); err != nil {
		return refuse(errorResponse("", helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "bad session hello: "+err.Error()))
	}
	hello := first.GetHello()
	if hello == nil {
		return refuse(errorResponse("", helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "a session begins with a hello"))
	}
	ready, err := protocol.Accept(hello)
	if err == nil && cfg.refuseKeys && protocol.SealsRecords(ready) {
		// Record keys refused (Run): the session version that carries them is not offered.
		if !slices.Contains(hello.GetVersions(), helperv1.ProtocolVersion_PROTOCOL_VERSION_2) {
			err = protocol.Errorf(helperv1.ErrorCode_ERROR_CODE_UNSUPPORTED_VERSION, "no common session protocol version without record keys")
		}
		ready.Version = helperv1.ProtocolVersion_PROTOCOL_VERSION_2
	}
	if err != nil {
		return refuse(failure("", err))
	}
	out := protocol.NewWriter(stdout, protocol.MaxResponseBytes, nil)
	defer out.Stop()
	s := &session{
		cfg: cfg, ready: ready, frameCap: protocol.SessionFrameCap(int(ready.GetChunkBytes())), out: out,
		children: newChildren(),
		running:  map[string]*inFlight{}, partial: map[string]*protocol.Assembly{},
	}
	s.send(&helperv1.Frame{Frame: &helperv1.Frame_Ready{Ready: ready}})
	stopBeat := s.heartbeats(time.Duration(ready.GetHeartbeatMillis()) * time.Millisecond)
	defer stopBeat()
	s.read(stdin)
	s.shutdown()
	return nil
}

// read handles frames until stdin ends, the writer fails, or the gateway breaks the protocol.
func (s *session) read(stdin io.Reader) {
	for {
		var f helperv1.SessionFrame
		c, err := protocol.ReadRequestFrame(stdin, &f, s.frameCap)
		switch {
		case err == nil && c != nil && c.Body:
			err = s.body(c)
		case err == nil && c != nil:
			err = s.chunk(c.Chunk)
		case err == nil:
			err = s.handle(&f)
		}
		switch {
		case errors.Is(err, io.EOF):
			return
		case err != nil:
			// The gateway broke the protocol: say why (an id it never sent, so it closes the
			// session) and end it.
			s.send(responseFrame(errorResponse("", helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "session protocol: "+err.Error())))
			s.out.Flush(refusalFlush)
			return
		}
		if s.out.Failed() {
			return
		}
	}
}

// handle acts on one frame from the gateway.
func (s *session) handle(f *helperv1.SessionFrame) error {
	switch fr := f.GetFrame().(type) {
	case *helperv1.SessionFrame_Request:
		if err := s.admit(fr.Request.GetRequestId()); err != nil {
			return err
		}
		s.start(fr.Request)
	case *helperv1.SessionFrame_RequestChunk:
		return s.chunk(fr.RequestChunk)
	case *helperv1.SessionFrame_Body:
		return s.body(&protocol.Piece{Chunk: fr.Body, Body: true})
	case *helperv1.SessionFrame_Cancel:
		id := fr.Cancel.GetRequestId()
		s.mu.Lock()
		r := s.running[id]
		if r != nil && r.body != nil {
			// Nothing more of the body comes: a write not yet committed is abandoned, and an
			// answered one frees its id.
			r.body.cancel()
			if r.answered {
				delete(s.running, id)
			}
		}
		s.mu.Unlock()
		if r != nil { // an unknown id: the request has just ended, its answer is on its way
			r.cancel()
		}
	default:
		return errors.New("an unexpected frame")
	}
	return nil
}

// admit checks a new request id: present, bounded, not in use, and within max_in_flight
// (a chunked request counts from its first chunk).
func (s *session) admit(id string) error {
	if id == "" || len(id) > protocol.MaxRequestIDBytes {
		return errors.New("a request id must be 1 to 64 bytes")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, run := s.running[id]
	_, part := s.partial[id]
	switch {
	case run || part:
		return fmt.Errorf("request id %q is in use", id)
	case len(s.running)+len(s.partial) >= int(s.ready.GetMaxInFlight()):
		return errors.New("more requests in flight than the session allows")
	}
	return nil
}

// chunk adds a piece of a large request; the last one starts it.
func (s *session) chunk(c *helperv1.Chunk) error {
	id := c.GetRequestId()
	s.mu.Lock()
	a := s.partial[id]
	s.mu.Unlock()
	if a == nil {
		if err := s.admit(id); err != nil {
			return err
		}
		a = protocol.NewAssembly(protocol.MaxRequestBytes)
		s.mu.Lock()
		s.partial[id] = a
		s.mu.Unlock()
	}
	if err := a.Add(c.GetData()); err != nil {
		return err
	}
	if !c.GetLast() {
		return nil
	}
	s.mu.Lock()
	delete(s.partial, id)
	s.mu.Unlock()
	var req helperv1.Request
	if err := a.Decode(&req); err != nil {
		return err
	}
	if req.GetRequestId() != id {
		return errors.New("chunks of one request id decode as another")
	}
	s.start(&req)
	return nil
}

// body adds a piece of a write's content to its request.
func (s *session) body(c *protocol.Piece) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.running[c.GetRequestId()]
	if r == nil || r.body == nil || r.body.ended() {
		return errors.New("a body piece for no request taking one")
	}
	if err := r.body.add(c); err != nil {
		return err
	}
	if c.GetLast() && r.answered {
		delete(s.running, c.GetRequestId())
	}
	return nil
}

// start serves req in its own goroutine.
func (s *session) start(req *helperv1.Request) {
	id := req.GetRequestId()
	cancel := make(chan struct{})
	r := &inFlight{cancel: sync.OnceFunc(func() { close(cancel) })}
	if n := req.GetBodyBytes(); n > 0 {
		r.body = newBody(n)
	}
	s.mu.Lock()
	s.running[id] = r
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		resp, content := s.serve(req, r.body, cancel)
		// Out of the running set before the answer leaves: once the gateway has read it, it
		// may send another request in the slot this one frees. A body still coming keeps the
		// id in use until it ends.
		s.mu.Lock()
		if r.body != nil && !r.body.ended() {
			r.answered = true
			r.body.close()
		} else {
			delete(s.running, id)
		}
		s.mu.Unlock()
		s.respond(resp, content)
	}()
}

// serve performs one request and returns its response, refusals included, and for a read
// with Request.body_response its content, sent as a body before the response.
func (s *session) serve(req *helperv1.Request, b *body, cancel <-chan struct{}) (*helperv1.Response, []byte) {
	id := req.GetRequestId()
	if v := req.GetVersion(); !protocol.SessionVersion(v) || v > s.ready.GetVersion() {
		return errorResponse(id, helperv1.ErrorCode_ERROR_CODE_UNSUPPORTED_VERSION, "a session's requests are of a session version no higher than the session's"), nil
	}
	if err := checkBodies(req); err != nil {
		return failure(id, err), nil
	}
	if err := held(req); err != nil {
		return failure(id, err), nil
	}
	switch op := req.GetOperation().(type) {
	case *helperv1.Request_File:
		root, err := fileops.OpenRoot(s.cfg.Root)
		if err != nil {
			return failure(id, err), nil
		}
		defer root.Close()
		lim := fileops.Limits{MaxFileBytes: req.GetLimits().GetMaxFileBytes()}
		var res *executionv1.FileResult
		if b != nil {
			res, err = upload(root, op.File.GetWrite(), b, lim, cancel)
		} else {
			res, err = root.Do(op.File, lim)
		}
		if err != nil {
			return failure(id, err), nil
		}
		var content []byte
		if req.GetBodyResponse() {
			// Never nil: an empty read still answers with its (empty, marked) body.
			if content = res.GetRead().GetContent(); content == nil {
				content = []byte{}
			}
			res.GetRead().Content = nil
		}
		return &helperv1.Response{RequestId: id, Outcome: &helperv1.Response_File{File: res}}, content
	case *helperv1.Request_Command:
		return s.children.run(s.cfg, req, cancel), nil
	case *helperv1.Request_Durable:
		return s.durable(req, cancel), nil
	default:
		return errorResponse(id, helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "no operation"), nil
	}
}

// durable serves a durable operation; a Cancel answers a follow at once.
func (s *session) durable(req *helperv1.Request, cancel <-chan struct{}) *helperv1.Response {
	id := req.GetRequestId()
	cfg := supervisor.Config{Root: s.cfg.Root, Self: selfExe, Spawn: s.children.spawnDetached, RefuseKeys: s.cfg.refuseKeys}
	res, err := supervisor.Do(cfg, req, cancel)
	if err != nil {
		return failure(id, err)
	}
	return &helperv1.Response{RequestId: id, Outcome: &helperv1.Response_Durable{Durable: res}}
}

// checkBodies refuses a body where the operation has none.
func checkBodies(req *helperv1.Request) error {
	write := req.GetFile().GetWrite()
	switch {
	case req.GetBodyBytes() > 0 && (write == nil || len(write.GetContent()) > 0):
		return protocol.Errorf(helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "a body is the content of a write that carries none")
	case req.GetBodyResponse() && req.GetFile().GetRead() == nil:
		return protocol.Errorf(helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "only a read answers with a body")
	}
	return nil
}

// upload performs a write whose content is the request's body, written as it comes.
func upload(root *fileops.Root, req *executionv1.WriteFile, b *body, lim fileops.Limits, cancel <-chan struct{}) (*executionv1.FileResult, error) {
	u, err := root.BeginWrite(req, b.want, lim)
	if err != nil {
		return nil, err
	}
	for {
		piece, err := b.next(cancel)
		if errors.Is(err, io.EOF) {
			break
		}
		if err == nil {
			err = u.Write(piece.GetData())
			piece.Release()
		}
		if err != nil {
			u.Abort()
			return nil, err
		}
	}
	u.ReleaseLater()
	res, err := u.Commit()
	go u.Release() // beside the answer, not before it
	if err != nil {
		return nil, err
	}
	return &executionv1.FileResult{Result: &executionv1.FileResult_Write{Write: res}}, nil
}

// respond sends a response — one frame when it fits a chunk, else chunks of its encoding —
// after content as a body, when there is one. Body and response are one message of the
// writer, so they stay in order.
func (s *session) respond(resp *helperv1.Response, content []byte) {
	id := resp.GetRequestId()
	chunk := int(s.ready.GetChunkBytes())
	var frames []protocol.Encoded
	if resp.GetError() == nil && content != nil {
		frames = protocol.ResponseBody(id, content, chunk)
	}
	frame := responseFrame(resp)
	if proto.Size(frame) <= chunk {
		s.out.Send(append(frames, protocol.Whole(frameBytes(frame))), nil)
		return
	}
	payload, err := protocol.Marshal(resp)
	if err != nil {
		s.send(responseFrame(errorResponse(id, helperv1.ErrorCode_ERROR_CODE_INTERNAL, "the response could not be encoded")))
		return
	}
	s.out.Send(append(frames, protocol.ResponseChunks(id, payload, chunk)...), nil)
}

// send queues one whole frame.
func (s *session) send(f *helperv1.Frame) {
	s.out.Send([]protocol.Encoded{protocol.Whole(frameBytes(f))}, nil)
}

// heartbeats sends a session heartbeat every interval (none queued twice); the returned
// function stops them.
func (s *session) heartbeats(every time.Duration) func() {
	done := make(chan struct{})
	started := time.Now()
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				s.out.Heartbeat(frameBytes(&helperv1.Frame{Frame: &helperv1.Frame_Heartbeat{Heartbeat: &helperv1.Heartbeat{
					ElapsedMillis: uint64(time.Since(started) / time.Millisecond)}}}))
			}
		}
	}()
	return sync.OnceFunc(func() { close(done) })
}

// shutdown ends the session: nothing more is answered, every command is cancelled, and
// whatever is still alive after shutdownGrace is killed, so that nothing the session
// started survives it.
func (s *session) shutdown() {
	s.out.Stop()
	s.mu.Lock()
	for _, r := range s.running {
		r.cancel()
	}
	s.mu.Unlock()
	finished := make(chan struct{})
	go func() { s.wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(shutdownGrace):
	}
	s.children.killAll()
	if failpoint.Breaks(breakLeaveProcess) {
		leaveProcess()
	}
}

// breakLeaveProcess, in a failpoint build asked to break it (failpoint.Breaks), leaves a
// process behind at every session's end, once the session has killed what it started: a
// sleep in a session of its own that nothing waits for or kills. It is the fault suite's
// proof that its node check finds a process an executor's helper left (test/chaos).
const breakLeaveProcess = "helper-leaks-process"

// leftFor is how long the process breakLeaveProcess leaves lives: longer than any test
// looks for it (the node kills it with its Pod).
const leftFor = 10 * time.Minute

// leaveProcess starts the process breakLeaveProcess leaves; its output goes nowhere, so
// that it holds no stream of the exec that started the session.
func leaveProcess() {
	cmd := exec.Command("sleep", strconv.Itoa(int(leftFor/time.Second)))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if cmd.Start() == nil {
		_ = cmd.Process.Release()
	}
}

// frameBytes encodes a frame; the frames built here always encode.
func frameBytes(f *helperv1.Frame) []byte {
	b, err := protocol.Marshal(f)
	if err != nil {
		panic(fmt.Sprintf("encoding a helper frame: %v", err))
	}
	return b
}

func responseFrame(r *helperv1.Response) *helperv1.Frame {
	return &helperv1.Frame{Frame: &helperv1.Frame_Response{Response: r}}
}
