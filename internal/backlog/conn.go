package backlog

import (
	"context"
	"fmt"
	"net"
	"sync"

	"golang.org/x/net/http2/hpack"
)

// RequestIDHeader is the response header that names a call; the gateway sends it before
// the call's handler runs (Call's binding depends on it).
const RequestIDHeader = "x-request-id"

// headerTableSize is the HPACK dynamic table size of grpc-go's encoder: 4096 by default,
// and a client's SETTINGS may only shrink it.
const headerTableSize = 4096

// Conn is an accepted connection whose writes and reads are followed, frame by frame, to
// know when each call's answer has left. Only its owner (gRPC) reads and writes it.
type Conn struct {
	net.Conn
	l *Ledger
	a *account

	closeOnce sync.Once
	gone      chan struct{} // closed by Close

	wmu  sync.Mutex // the write side's scanner and decoder (gRPC writes from one goroutine)
	out  scanner
	hdec *hpack.Decoder
	rmu  sync.Mutex
	in   scanner

	mu      sync.Mutex
	pending map[string]*Call    // calls whose response headers were not written yet
	streams map[uint32]*Call    // calls by their HTTP/2 stream
	over    map[uint32]struct{} // streams that ended before a call was bound to them
	closed  bool
}

// maxOver bounds Conn.over: streams ended unbound are a reset racing its call's headers,
// or calls that never reached the edge (an unknown method); past the bound the set starts
// again, and a call then bound to a forgotten stream counts until the connection closes.
const maxOver = 4096

func newConn(c net.Conn, l *Ledger, a *account) *Conn {
	bc := &Conn{Conn: c, l: l, a: a, gone: make(chan struct{}),
		pending: make(map[string]*Call), streams: make(map[uint32]*Call), over: make(map[uint32]struct{})}
	bc.hdec = hpack.NewDecoder(headerTableSize, nil)
	bc.hdec.SetMaxStringLength(maxHeaderBlock)
	bc.out = scanner{ev: outEvents{bc}, blocks: true}
	bc.in = scanner{preface: clientPrefaceLen, ev: inEvents{bc}}
	return bc
}

// Write writes p, then counts what of it left: DATA frames release their stream's answer
// bytes. A write the accounting cannot follow closes the connection.
func (c *Conn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.wmu.Lock()
	ferr := c.out.feed(p[:n])
	c.wmu.Unlock()
	if ferr != nil {
		c.Close()
		return n, ferr
	}
	return n, err
}

// Read reads into p, then looks for the client's stream resets: a reset stream's queued
// answer is dropped by gRPC, never written.
func (c *Conn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.rmu.Lock()
	ferr := c.in.feed(p[:n])
	c.rmu.Unlock()
	if ferr != nil {
		c.Close()
		return n, ferr
	}
	return n, err
}

// Close closes the connection and frees everything its calls held unwritten.
func (c *Conn) Close() error {
	err := c.Conn.Close()
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closed = true
		var owed int64
		for sid, call := range c.streams {
			owed += call.owed
			call.owed, call.ended = 0, true
			delete(c.streams, sid)
		}
		c.mu.Unlock()
		close(c.gone)
		c.l.release(c.a, owed)
		c.l.closed(c.a)
	})
	return err
}

// Begin registers a call whose response headers will carry requestID. The caller sends
// those headers and calls Done when its handler returns.
func (c *Conn) Begin(requestID string) *Call {
	call := &Call{conn: c, id: requestID, bound: make(chan struct{})}
	c.mu.Lock()
	if !c.closed {
		c.pending[requestID] = call
	}
	c.mu.Unlock()
	return call
}

// outEvents is the write side: DATA leaves, header blocks bind streams, streams end.
type outEvents struct{ c *Conn }

func (e outEvents) data(sid uint32, n int) {
	c := e.c
	c.mu.Lock()
	call := c.streams[sid]
	var out int64
	if call != nil {
		out = min(int64(n), call.owed)
		call.owed -= out
	}
	c.mu.Unlock()
	c.l.release(c.a, out)
}

func (e outEvents) headers(sid uint32, block []byte) error {
	c := e.c
	fields, err := c.hdec.DecodeFull(block)
	if err != nil {
		return fmt.Errorf("%w: %w", errFraming, err)
	}
	for _, f := range fields {
		if f.Name != RequestIDHeader {
			continue
		}
		c.mu.Lock()
		call := c.pending[f.Value]
		if call != nil && c.streams[sid] == nil && !c.closed {
			delete(c.pending, f.Value)
			call.sid = sid
			if _, ended := c.over[sid]; ended {
				// The client reset the stream before its headers went out.
				delete(c.over, sid)
				call.ended = true
			} else {
				c.streams[sid] = call
			}
			close(call.bound)
		}
		c.mu.Unlock()
		break
	}
	return nil
}

func (e outEvents) ended(sid uint32) { e.c.end(sid) }
func (e outEvents) reset(sid uint32) { e.c.end(sid) }

// inEvents is the read side: only the client's resets matter (its END_STREAM ends only
// its half of the stream).
type inEvents struct{ c *Conn }

func (inEvents) data(uint32, int)             {}
func (inEvents) headers(uint32, []byte) error { return nil }
func (inEvents) ended(uint32)                 {}
func (e inEvents) reset(sid uint32)           { e.c.end(sid) }

// end frees what stream sid's call still held unwritten: the stream is over. A stream with
// no call yet is remembered, for a call whose headers were still on their way.
func (c *Conn) end(sid uint32) {
	c.mu.Lock()
	call := c.streams[sid]
	var owed int64
	if call != nil {
		owed = call.owed
		call.owed, call.ended = 0, true
		delete(c.streams, sid)
	} else if !c.closed {
		if len(c.over) >= maxOver {
			clear(c.over)
		}
		c.over[sid] = struct{}{}
	}
	c.mu.Unlock()
	c.l.release(c.a, owed)
}

// Call is one RPC's account on its connection.
type Call struct {
	conn  *Conn
	id    string
	bound chan struct{} // closed when the call's stream is known

	// under conn.mu
	sid      uint32
	reserved int64 // taken for an answer being fetched
	owed     int64 // handed to gRPC, not yet written
	ended    bool  // the stream is over: nothing more will be written
	done     bool
}

// Reserve waits for room in the client's backlog and takes n more bytes of it for an answer
// the call is about to fetch (n may be 0: only the room). It fails with ErrFull when no
// room came within maxWait, or when ctx ends first; the call then fetches nothing.
func (k *Call) Reserve(ctx context.Context, n int64) error {
	c := k.conn
	if err := c.l.acquire(ctx, c.a, n); err != nil {
		return err
	}
	c.mu.Lock()
	if k.done {
		c.mu.Unlock()
		c.l.release(c.a, n)
		return nil
	}
	k.reserved += n
	c.mu.Unlock()
	return nil
}

// Settle makes the call's reservation n once its answer is in hand: what the fetch did not
// need goes back at once, so a reservation lasts as long as a fetch, never a whole call.
func (k *Call) Settle(n int64) {
	c := k.conn
	c.mu.Lock()
	if k.done {
		c.mu.Unlock()
		return
	}
	diff := k.reserved - n
	k.reserved = n
	c.mu.Unlock()
	if diff > 0 {
		c.l.release(c.a, diff)
	} else {
		c.l.add(c.a, -diff)
	}
}

// Send counts n bytes of answer the call is about to hand to gRPC, out of its reservation
// first. It waits for the call's stream to be bound (its response headers written), and
// fails with ErrNotTaken when the connection closes or ctx ends first: the client is not
// reading. Nothing is counted for a stream that is over: gRPC will not write to it.
func (k *Call) Send(ctx context.Context, n int64) error {
	c := k.conn
	select {
	case <-c.gone:
		return fmt.Errorf("%w: the connection closed", ErrNotTaken)
	default:
	}
	select {
	case <-k.bound:
	case <-c.gone:
		return fmt.Errorf("%w: the connection closed", ErrNotTaken)
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ErrNotTaken, context.Cause(ctx))
	}
	c.mu.Lock()
	if k.ended || c.closed || ctx.Err() != nil {
		c.mu.Unlock()
		return nil
	}
	from := min(n, k.reserved)
	k.reserved -= from
	k.owed += n
	c.mu.Unlock()
	c.l.add(c.a, n-from)
	return nil
}

// Done ends the call's handler: its reservation goes back; what it sent counts until it
// is written.
func (k *Call) Done() {
	c := k.conn
	c.mu.Lock()
	if k.done {
		c.mu.Unlock()
		return
	}
	k.done = true
	reserved := k.reserved
	k.reserved = 0
	if c.pending[k.id] == k {
		delete(c.pending, k.id)
	}
	c.mu.Unlock()
	c.l.release(c.a, reserved)
}

type callKey struct{}

// WithCall returns ctx carrying k.
func WithCall(ctx context.Context, k *Call) context.Context {
	return context.WithValue(ctx, callKey{}, k)
}

// Reserve reserves n bytes for the call of ctx (see Call.Reserve); without one (a handler
// tested alone) it does nothing.
func Reserve(ctx context.Context, n int64) error {
	if k, ok := ctx.Value(callKey{}).(*Call); ok {
		return k.Reserve(ctx, n)
	}
	return nil
}

// Settle settles the reservation of the call of ctx (see Call.Settle), if any.
func Settle(ctx context.Context, n int64) {
	if k, ok := ctx.Value(callKey{}).(*Call); ok {
		k.Settle(n)
	}
}
