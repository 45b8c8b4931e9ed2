package backlog

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults and ceilings of Config.
const (
	// DefaultClientBytes: 64 MiB holds two answers at the largest file read a profile may
	// allow (24 MiB, plus room), or eight at a common 8 MiB — enough for a client that reads
	// its answers, however many calls it multiplexes, and what one that does not may pin.
	DefaultClientBytes = 64 << 20
	// DefaultClientConns: SDKs multiplex over one connection; 64 leaves room for a platform
	// whose workers share a client certificate, and bounds the transport buffers and
	// streams (each connection may carry 256) one identity can hold.
	DefaultClientConns = 64
	// minClientBytes: a budget below a few MiB would serialize ordinary reads.
	minClientBytes = 4 << 20
)

// ErrConnections: the client identity already has Config.ClientConns connections open.
var ErrConnections = errors.New("backlog: the client has too many connections open")

// ErrFull: the client's backlog stayed full — it is not taking its answers — for as long
// as a call may wait for room (maxWait), or more calls already wait (maxWaiters). The call
// fetched nothing; it may be retried.
var ErrFull = errors.New("backlog: the client's unread answers fill its backlog")

// ErrNotTaken: the connection did not take the call's response headers before the call
// ended (its client reads nothing), so its answer is not handed over.
var ErrNotTaken = errors.New("backlog: the client is not reading this connection")

// Waiting for room. A call waits only while its client is slow to read; a client that
// does not read must not hold the replica's call slots (security.RPCLimiter) with calls
// parked here, so the wait is short and the waiters few.
const (
	// maxWait: a reader drains a 64 MiB backlog in well under a second on any link a
	// gateway serves; ten seconds without room is a client that is not reading.
	maxWait = 10 * time.Second
	// maxWaiters: calls of one client waiting at once; more are refused at once.
	maxWaiters = 32
)

// Config bounds what one client identity holds in the gateway.
type Config struct {
	// ClientBytes bounds the answer bytes held for one client identity: reserved by its
	// calls fetching answers, plus answers not yet written to its connections.
	ClientBytes int64
	// ClientConns bounds one client identity's open connections.
	ClientConns int
}

// Validate reports every problem of c.
func (c Config) Validate() error {
	var errs []error
	if c.ClientBytes < minClientBytes {
		errs = append(errs, fmt.Errorf("backlog: a client's byte budget of %d is under %d", c.ClientBytes, minClientBytes))
	}
	if c.ClientConns < 1 {
		errs = append(errs, fmt.Errorf("backlog: a client's connection cap of %d is under 1", c.ClientConns))
	}
	return errors.Join(errs...)
}

// Ledger keeps every client identity's account: its connections and the bytes held for it.
type Ledger struct {
	cfg     Config
	maxWait time.Duration // maxWait; shorter in tests

	mu      sync.Mutex
	clients map[string]*account

	waits, refusedWaits, refusedConns, inconsistencies atomic.Uint64
}

// account is one client identity's: entries exist while it has a connection open or bytes
// held. Its fields are under Ledger.mu.
type account struct {
	name    string
	used    int64 // reserved plus unwritten
	conns   int
	waiters []*waiter // first come, first served
}

// waiter is a call waiting for room: granted is closed once its bytes are taken for it.
type waiter struct {
	n       int64
	granted chan struct{}
}

// New returns a ledger with cfg's bounds.
func New(cfg Config) (*Ledger, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Ledger{cfg: cfg, maxWait: maxWait, clients: make(map[string]*account)}, nil
}

// Accept admits conn, authenticated as client, and returns it wrapped; the wrapper must be
// the connection gRPC serves. It refuses with ErrConnections when client is at its cap.
func (l *Ledger) Accept(conn net.Conn, client string) (*Conn, error) {
	l.mu.Lock()
	a := l.clients[client]
	if a == nil {
		a = &account{name: client}
		l.clients[client] = a
	}
	if a.conns >= l.cfg.ClientConns {
		l.mu.Unlock()
		l.refusedConns.Add(1)
		return nil, fmt.Errorf("%w (%d)", ErrConnections, l.cfg.ClientConns)
	}
	a.conns++
	l.mu.Unlock()
	return newConn(conn, l, a), nil
}

// fits reports whether n more bytes fit a's budget (n = 0: whether any room is left); an
// amount over the whole budget fits when nothing else is held, so one large answer is
// never refused. Callers hold l.mu.
func (l *Ledger) fits(a *account, n int64) bool {
	return a.used == 0 || a.used+max(n, 1) <= l.cfg.ClientBytes
}

// acquire takes n bytes of a's budget, first come first served, waiting at most maxWait
// for room (ErrFull after it, or at once beyond maxWaiters).
func (l *Ledger) acquire(ctx context.Context, a *account, n int64) error {
	if err := ctx.Err(); err != nil {
		return context.Cause(ctx)
	}
	l.mu.Lock()
	if len(a.waiters) == 0 && l.fits(a, n) {
		a.used += n
		l.mu.Unlock()
		return nil
	}
	if len(a.waiters) >= maxWaiters {
		l.mu.Unlock()
		l.refusedWaits.Add(1)
		return fmt.Errorf("%w: %d calls already wait", ErrFull, maxWaiters)
	}
	w := &waiter{n: n, granted: make(chan struct{})}
	a.waiters = append(a.waiters, w)
	l.mu.Unlock()
	l.waits.Add(1)

	timer := time.NewTimer(l.maxWait)
	defer timer.Stop()
	var err error
	select {
	case <-w.granted:
		return nil
	case <-timer.C:
		err = fmt.Errorf("%w: no room for %s", ErrFull, l.maxWait)
		l.refusedWaits.Add(1)
	case <-ctx.Done():
		err = context.Cause(ctx)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if i := slices.Index(a.waiters, w); i >= 0 {
		a.waiters = slices.Delete(a.waiters, i, i+1)
		l.grant(a) // those behind it may fit now
		return err
	}
	// Granted meanwhile: give the bytes back.
	l.giveBack(a, n)
	return err
}

// add takes n bytes of a's budget without waiting: for bytes already in hand.
func (l *Ledger) add(a *account, n int64) {
	if n <= 0 {
		return
	}
	l.mu.Lock()
	a.used += n
	l.mu.Unlock()
}

// release gives n bytes back to a's budget and grants what waits, in order.
func (l *Ledger) release(a *account, n int64) {
	if n <= 0 {
		return
	}
	l.mu.Lock()
	l.giveBack(a, n)
	l.mu.Unlock()
}

// giveBack is release under l.mu. Giving back more than is held is a bug of the
// accounting, never of a client: it is counted (Stats.Inconsistencies) and clamped, so that
// it cannot take down the replica's other clients.
func (l *Ledger) giveBack(a *account, n int64) {
	a.used -= n
	if a.used < 0 {
		l.inconsistencies.Add(1)
		a.used = 0
	}
	l.grant(a)
	l.forget(a)
}

// grant takes room for the waiters at the head of a's queue while they fit; callers hold
// l.mu.
func (l *Ledger) grant(a *account) {
	for len(a.waiters) > 0 && l.fits(a, a.waiters[0].n) {
		w := a.waiters[0]
		a.waiters = a.waiters[1:]
		a.used += w.n
		close(w.granted)
	}
}

// closed ends one of a's connections.
func (l *Ledger) closed(a *account) {
	l.mu.Lock()
	a.conns--
	l.forget(a)
	l.mu.Unlock()
}

// forget drops a's entry once it holds nothing; callers hold l.mu.
func (l *Ledger) forget(a *account) {
	if a.conns == 0 && a.used == 0 && len(a.waiters) == 0 && l.clients[a.name] == a {
		delete(l.clients, a.name)
	}
}

// Stats is a snapshot of a Ledger, for metrics.
type Stats struct {
	// Bytes is what is held for every client; MaxClientBytes for the one holding most.
	Bytes, MaxClientBytes int64
	// Clients and Conns count identities with a connection open, and their connections.
	Clients, Conns int
	// Waits counts reservations that had to wait for a client's budget, RefusedWaits those
	// refused (ErrFull), RefusedConns the connections refused at a client's cap, and
	// Inconsistencies the releases of more than was held (a bug; clamped).
	Waits, RefusedWaits, RefusedConns, Inconsistencies uint64
}

// Stats returns the ledger's state.
func (l *Ledger) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := Stats{Clients: len(l.clients), Waits: l.waits.Load(), RefusedWaits: l.refusedWaits.Load(),
		RefusedConns: l.refusedConns.Load(), Inconsistencies: l.inconsistencies.Load()}
	for _, a := range l.clients {
		s.Bytes += a.used
		s.MaxClientBytes = max(s.MaxClientBytes, a.used)
		s.Conns += a.conns
	}
	return s
}
