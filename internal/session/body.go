package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/execplane/execplane/internal/protocol"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// ErrBodySize: the content a Transfer's Upload yielded is not the size its request
// announced. Nothing was written.
var ErrBodySize = errors.New("the content is not the size announced")

// Transfer is the content of a call that travels as a body (protocol.RequestBody,
// protocol.ResponseBody): a write's, produced as the caller receives it, or a read's,
// consumed as it arrives — so that a large transfer is forwarded as it goes, not held whole.
type Transfer struct {
	// Upload yields the next piece of a write's content, io.EOF after the last; the pieces
	// make exactly the request's body_bytes. Another error abandons the write (nothing is
	// written) and is returned. It is called from a goroutine of its own, which may go on
	// calling it after Stream has returned (an early answer), until it returns an error or
	// io.EOF: what it yields then is dropped.
	Upload func() ([]byte, error)
	// Download takes the next piece of a read's content, in order, on the caller's
	// goroutine. An error abandons the call and is returned. The content is whole only once
	// the call has returned the response.
	Download func([]byte) error
}

// Bodies reports whether the helper takes and gives content as bodies: when it does not,
// send whole requests with Do.
func (s *Session) Bodies() bool { return s.ready.GetBodies() }

// Stream is Do for a call with a body: a write (req.body_bytes set, t.Upload) or a read
// (req.body_response set, t.Download). Errors are Do's; besides, an Upload that fails or
// yields the wrong size (ErrBodySize) and a failed Download end the call with their error.
// A write is sent — may have run — only once the last piece of its body is on the stream.
func (s *Session) Stream(ctx context.Context, req *helperv1.Request, responseCap int, t Transfer) (*helperv1.Response, error) {
	if !s.Bodies() {
		return nil, fmt.Errorf("%w: the helper takes no bodies", ErrNotSent)
	}
	if (t.Upload != nil) != (req.GetBodyBytes() > 0) || (t.Download != nil) != req.GetBodyResponse() {
		return nil, fmt.Errorf("%w: a body transfer must match its request", ErrNotSent)
	}
	c, req, frames, err := s.begin(ctx, req, responseCap, func(c *call) {
		if t.Download != nil {
			c.download = newPipe()
		} else {
			c.upload = true
		}
	})
	if err != nil {
		return nil, err
	}
	if t.Download != nil {
		s.w.Send(frames, func() { c.sent.Store(true) })
		return s.download(ctx, c, t.Download)
	}
	return s.upload(ctx, c, s.w.Open(frames, func() { c.requested.Store(true) }), req.GetBodyBytes(), t.Upload)
}

// upload pumps the body beside the wait for the answer: a helper that refuses the write
// at once answers before the body is whole, and the rest of it is not sent.
func (s *Session) upload(ctx context.Context, c *call, st *protocol.Stream, size uint64, next func() ([]byte, error)) (*helperv1.Response, error) {
	var ended atomic.Bool // the body's last frame is on its way: no Cancel needed
	pumped := make(chan error, 1)
	go func() {
		var sent uint64
		for {
			piece, err := next()
			switch {
			case errors.Is(err, io.EOF) && sent == size:
				// The end is marked only once the caller's side has ended: content past
				// the size announced is refused, not cut off.
				st.Send(protocol.RequestBody(c.id, nil, s.chunk, true), true, func() { ended.Store(true); c.sent.Store(true) })
				return
			case errors.Is(err, io.EOF):
				err = fmt.Errorf("%w: %d of %d bytes", ErrBodySize, sent, size)
			case err == nil && uint64(len(piece)) > size-sent:
				err = fmt.Errorf("%w: more than %d bytes", ErrBodySize, size)
			}
			if err != nil {
				pumped <- err
				return
			}
			sent += uint64(len(piece))
			if len(piece) > 0 {
				st.Send(protocol.RequestBody(c.id, piece, s.chunk, false), false, nil)
			}
		}
	}()
	// stop ends the body short unless its end was taken to be written, and reports whether
	// the helper may have the whole request. The call's slot is freed only once the body
	// has ended and the answer came (release, second of two), so that the helper never sees
	// more requests than it allows — or at once, when none of the request left: the helper
	// never heard of it, and nothing will answer it.
	stop := func() (whole bool) {
		taken, ended := st.Abort()
		if taken == 0 {
			s.forget(c)
			return false
		}
		if !ended {
			s.cancel(c.id)
		}
		s.release(c)
		return ended
	}
	var err error
	select {
	case a := <-c.answer:
		stop()
		s.used.Store(time.Now().UnixNano())
		return a.resp, a.err
	case err = <-pumped:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if !s.abandon(c) { // answered meanwhile
		stop()
		a := <-c.answer
		return a.resp, a.err
	}
	if stop() && ctx.Err() != nil {
		return nil, fmt.Errorf("%w: %w", ErrLost, err) // the helper may commit it
	}
	return nil, err
}

// download hands the pieces of a read's body to take as they arrive, then the response.
func (s *Session) download(ctx context.Context, c *call, take func([]byte) error) (*helperv1.Response, error) {
	// answered: all of the body came before the answer.
	answered := func(a answer) (*helperv1.Response, error) {
		for _, piece := range c.download.drain() {
			if err := take(piece); err != nil {
				return nil, err
			}
		}
		s.used.Store(time.Now().UnixNano())
		return a.resp, a.err
	}
	for {
		select {
		case <-c.download.ready:
			for _, piece := range c.download.drain() {
				if err := take(piece); err != nil {
					if !s.abandon(c) {
						<-c.answer
					}
					return nil, err
				}
			}
		case a := <-c.answer:
			return answered(a)
		case <-ctx.Done():
			if !s.abandon(c) {
				return answered(<-c.answer)
			}
			return nil, fmt.Errorf("%w: %w", ErrLost, ctx.Err())
		}
	}
}

// pipe is a read's body as it arrives: the session's reader adds pieces without waiting
// (their total is bounded by the call's response cap) and the caller drains them.
type pipe struct {
	ready chan struct{} // signalled (buffered 1) when pieces were added

	mu     sync.Mutex
	pieces [][]byte
	got    int
	last   bool
}

func newPipe() *pipe { return &pipe{ready: make(chan struct{}, 1)} }

func (p *pipe) add(piece []byte, last bool, limit int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(piece) > limit-p.got {
		return fmt.Errorf("%w: a body over the request's cap of %d bytes", protocol.ErrFrameTooLarge, limit)
	}
	p.got += len(piece)
	p.last = last
	if len(piece) > 0 {
		p.pieces = append(p.pieces, piece)
		select {
		case p.ready <- struct{}{}:
		default:
		}
	}
	return nil
}

func (p *pipe) drain() [][]byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.pieces
	p.pieces = nil
	return out
}

func (p *pipe) ended() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last
}

func (p *pipe) empty() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.got == 0 && !p.last
}
