package helper

import (
	"fmt"
	"io"
	"sync"

	"github.com/execplane/execplane/internal/protocol"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// errBodyCancelled ends a body the gateway gave up on, or that its request no longer reads.
var errBodyCancelled = protocol.Errorf(helperv1.ErrorCode_ERROR_CODE_UNAVAILABLE, "the write was cancelled before its content was whole: nothing was written")

// body is a write's content as it arrives: the session's reader adds pieces, never waiting
// (the pieces are bounded by the size announced, itself under the file limit), and the
// request's goroutine takes them in order.
type body struct {
	want uint64

	mu        sync.Mutex
	ready     chan struct{} // signalled (buffered 1) on every change
	pieces    []*protocol.Piece
	got       uint64
	last      bool // every piece arrived
	cancelled bool // the gateway sent a Cancel: no more pieces come
	closed    bool // the request stopped reading: pieces are dropped
}

func newBody(want uint64) *body { return &body{want: want, ready: make(chan struct{}, 1)} }

// add keeps a piece; more than announced, or a last piece short of it, breaks the protocol.
// The caller gives the piece up (it is released once written, or dropped).
func (b *body) add(p *protocol.Piece) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	data, last := p.GetData(), p.GetLast()
	if uint64(len(data)) > b.want-b.got {
		return fmt.Errorf("a body over the %d bytes announced", b.want)
	}
	b.got += uint64(len(data))
	if last && b.got != b.want {
		return fmt.Errorf("a body of %d of the %d bytes announced", b.got, b.want)
	}
	if len(data) > 0 && !b.closed {
		b.pieces = append(b.pieces, p)
	} else {
		p.Release()
	}
	b.last = last
	b.signal()
	return nil
}

// cancel records the gateway's Cancel: the body ends short.
func (b *body) cancel() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cancelled = true
	b.signal()
}

// close records that the request no longer reads the body (it was answered before the body
// ended); what still arrives is dropped.
func (b *body) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.pieces {
		p.Release()
	}
	b.closed, b.pieces = true, nil
}

// ended reports whether nothing more of the body may arrive.
func (b *body) ended() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.last || b.cancelled
}

func (b *body) signal() {
	select {
	case b.ready <- struct{}{}:
	default:
	}
}

// next returns the next piece, io.EOF after the last, or errBodyCancelled when the body
// ends short or the request is cancelled. The caller releases the piece once written.
func (b *body) next(cancel <-chan struct{}) (*protocol.Piece, error) {
	for {
		b.mu.Lock()
		switch {
		case len(b.pieces) > 0:
			p := b.pieces[0]
			b.pieces[0] = nil
			b.pieces = b.pieces[1:]
			b.mu.Unlock()
			return p, nil
		case b.cancelled:
			b.mu.Unlock()
			return nil, errBodyCancelled
		case b.last:
			b.mu.Unlock()
			return nil, io.EOF
		}
		b.mu.Unlock()
		select {
		case <-b.ready:
		case <-cancel:
			return nil, errBodyCancelled
		}
	}
}
