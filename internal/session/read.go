package session

import (
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/execplane/execplane/internal/protocol"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// What the helper sends back is untrusted: every frame is checked against the calls in
// flight, and a frame that breaks the protocol ends the session.

// read handles the helper's frames until the stream ends or breaks the protocol.
func (s *Session) read() {
	defer close(s.readDone)
	for {
		var f helperv1.Frame
		piece, err := protocol.ReadResponseFrame(s.out, &f, s.frameCap)
		if err != nil {
			if errors.Is(err, io.EOF) {
				s.Close(ReasonBroken)
			} else {
				s.violate(nil, err)
			}
			return
		}
		s.heard.Store(time.Now().UnixNano())
		switch {
		case piece != nil && piece.Body:
			err = s.handleBody(piece.Chunk)
		case piece != nil:
			err = s.handleChunk(piece.Chunk)
		default:
			err = s.handle(&f)
		}
		if err != nil {
			return
		}
	}
}

// handle delivers one frame; an error means the session is closed.
func (s *Session) handle(f *helperv1.Frame) error {
	switch fr := f.GetFrame().(type) {
	case *helperv1.Frame_Heartbeat:
		return nil
	case *helperv1.Frame_Response:
		c, err := s.lookup(fr.Response.GetRequestId(), false)
		if err != nil {
			return s.violate(c, err)
		}
		if proto.Size(fr.Response) > c.cap {
			return s.violate(c, fmt.Errorf("a response over the request's cap of %d bytes", c.cap))
		}
		if err := checkBodyAnswered(c, fr.Response); err != nil {
			return s.violate(c, err)
		}
		s.deliver(c, fr.Response)
	case *helperv1.Frame_ResponseChunk:
		return s.handleChunk(fr.ResponseChunk)
	case *helperv1.Frame_Body:
		return s.handleBody(fr.Body)
	default:
		return s.violate(nil, errors.New("a frame of a kind the session does not expect"))
	}
	return nil
}

// handleChunk adds a piece of a chunked response; the last one delivers it.
func (s *Session) handleChunk(ch *helperv1.Chunk) error {
	c, err := s.lookup(ch.GetRequestId(), true)
	if err != nil {
		return s.violate(nil, err)
	}
	if c.assembly == nil {
		c.assembly = protocol.NewAssembly(c.cap)
	}
	if err := c.assembly.Add(ch.GetData()); err != nil {
		return s.violate(c, err)
	}
	if !ch.GetLast() {
		return nil
	}
	var resp helperv1.Response
	if err := c.assembly.Decode(&resp); err != nil {
		return s.violate(c, err)
	}
	if resp.GetRequestId() != c.id {
		return s.violate(c, errors.New("chunks of one request decode as another's response"))
	}
	if err := checkBodyAnswered(c, &resp); err != nil {
		return s.violate(c, err)
	}
	c.assembly = nil
	s.deliver(c, &resp)
	return nil
}

// handleBody adds a piece of a read's content to its call, under the call's response cap.
func (s *Session) handleBody(ch *helperv1.Chunk) error {
	c, err := s.lookup(ch.GetRequestId(), false)
	if err != nil {
		return s.violate(c, err)
	}
	if c.download == nil || c.download.ended() {
		return s.violate(c, errors.New("a body for a request that takes none, or after its end"))
	}
	if err := c.download.add(ch.GetData(), ch.GetLast(), c.cap); err != nil {
		return s.violate(c, err)
	}
	return nil
}

// checkBodyAnswered: a read answered with a body has all of it before its response; an
// error may come instead of a body, never after a piece of one; a write whose body is not
// whole yet may only be refused.
func checkBodyAnswered(c *call, resp *helperv1.Response) error {
	switch {
	case c.upload && !c.sent.Load() && resp.GetError() == nil:
		// Before its body is whole a write can only have been refused.
		return errors.New("a write answered as done before its body was whole")
	case c.download == nil:
		return nil
	case resp.GetError() != nil && c.download.empty():
		return nil
	case !c.download.ended():
		return errors.New("a response before the end of its body")
	case resp.GetError() != nil:
		return errors.New("an error after a body")
	}
	return nil
}

// lookup finds the call an answer is for: one that was sent and not answered. A response
// frame may not interrupt a chunked one.
func (s *Session) lookup(id string, chunk bool) (*call, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.calls[id]
	switch {
	case !ok:
		return nil, errors.New("an answer for a request id not in flight")
	case !c.sent.Load() && !(c.upload && c.requested.Load()):
		// (An upload may be answered — refused — once its request is out, before its body
		// is whole.)
		return nil, errors.New("an answer before its request was sent")
	case !chunk && c.assembly != nil:
		return c, errors.New("a response in the middle of a chunked one")
	}
	return c, nil
}

// deliver hands a response to its caller and frees its slot.
func (s *Session) deliver(c *call, resp *helperv1.Response) {
	s.mu.Lock()
	delete(s.calls, c.id)
	s.mu.Unlock()
	s.release(c)
	s.served.Add(1)
	c.answer <- answer{resp: resp}
}

// release frees a call's slot once it is answered — and, for an upload, once its body has
// ended too.
func (s *Session) release(c *call) {
	if !c.upload || c.releases.Add(1) == 2 {
		<-s.slots
	}
}

// violate closes the session for a protocol violation: the call the bad answer was for
// (when known) fails with it, every other call as the closing decides.
func (s *Session) violate(c *call, err error) error {
	err = fmt.Errorf("%w: %v", ErrViolation, err)
	if c != nil {
		s.mu.Lock()
		if _, ok := s.calls[c.id]; ok {
			delete(s.calls, c.id)
			s.release(c)
			c.answer <- answer{err: err}
		}
		s.mu.Unlock()
	}
	s.Close(ReasonViolation)
	return err
}
