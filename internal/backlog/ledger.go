package backlog

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
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

// ErrNotTaken: the connection did not take the call's response headers before the call
// ended (its client reads nothing), so its answer is not handed over.
var ErrNotTaken = errors.New("backlog: the client is not reading this connection")

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
	cfg Config

	mu      sync.Mutex
	clients map[string]*account

	waits, refusedConns atomic.Uint64
}

// account is one client identity's: entries exist while it has a connection open.
type account struct {
	name  string
	used  int64         // reserved plus unwritten, under Ledger.mu
	conns int           // under Ledger.mu
	freed chan struct{} // closed and replaced when used goes down
}

// New returns a ledger with cfg's bounds.
func New(cfg Config) (*Ledger, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Ledger{cfg: cfg, clients: make(map[string]*account)}, nil
}

// Accept admits conn, authenticated as client, and returns it wrapped; the wrapper must be
// the connection gRPC serves. It refuses with ErrConnections when client is at its cap.
func (l *Ledger) Accept(conn net.Conn, client string) (*Conn, error) {
	l.mu.Lock()
	a := l.clients[client]
	if a == nil {
		a = &account{name: client, freed: make(chan struct{})}
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

// acquire takes n bytes of a's budget, waiting while it is spent. An amount over the whole
// budget is taken when nothing else is held, so one large answer is never refused.
func (l *Ledger) acquire(ctx context.Context, a *account, n int64) error {
	waited := false
	for {
		l.mu.Lock()
		if a.used == 0 || a.used+n <= l.cfg.ClientBytes {
			a.used += n
			l.mu.Unlock()
			return nil
		}
		freed := a.freed
		l.mu.Unlock()
		if !waited {
			waited = true
			l.waits.Add(1)
		}
		select {
		case <-freed:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// add takes n bytes of a's budget without waiting: for bytes already in hand.
func (l *Ledger) add(a *account, n int64) {
	l.mu.Lock()
	a.used += n
	l.mu.Unlock()
}

// release gives n bytes back to a's budget and wakes its waiters.
func (l *Ledger) release(a *account, n int64) {
	if n <= 0 {
		return
	}
	l.mu.Lock()
	a.used -= n
	if a.used < 0 {
		panic("backlog: released more than was held")
	}
	close(a.freed)
	a.freed = make(chan struct{})
	l.forget(a)
	l.mu.Unlock()
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
	if a.conns == 0 && a.used == 0 && l.clients[a.name] == a {
		delete(l.clients, a.name)
	}
}

// Stats is a snapshot of a Ledger, for metrics.
type Stats struct {
	// Bytes is what is held for every client; MaxClientBytes for the one holding most.
	Bytes, MaxClientBytes int64
	// Clients and Conns count identities with a connection open, and their connections.
	Clients, Conns int
	// Waits counts reservations that had to wait for a client's budget; RefusedConns the
	// connections refused at a client's cap.
	Waits, RefusedConns uint64
}

// Stats returns the ledger's state.
func (l *Ledger) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := Stats{Clients: len(l.clients), Waits: l.waits.Load(), RefusedConns: l.refusedConns.Load()}
	for _, a := range l.clients {
		s.Bytes += a.used
		s.MaxClientBytes = max(s.MaxClientBytes, a.used)
		s.Conns += a.conns
	}
	return s
}
