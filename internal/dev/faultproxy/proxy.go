// Package faultproxy is a TCP proxy that injects network faults between two processes of the
// local system: latency, a silent stall (bytes held, nothing closed: a partition no side
// notices), resets of every open connection, and refusal of new ones. The fault suite
// (test/chaos) puts one between each gateway and the API server and between the gateways
// and the controllers; its target is chosen per connection, as a Service picks a ready
// endpoint.
package faultproxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// copyBuffer is the size of one forwarded chunk.
const copyBuffer = 32 << 10

// Proxy forwards each accepted connection to the address its target function names at
// accept time. It is safe for concurrent use.
type Proxy struct {
	ln     net.Listener
	target func() string

	mu       sync.Mutex
	cond     *sync.Cond
	delay    time.Duration
	stalled  bool
	refusing bool
	closed   bool
	conns    map[net.Conn]struct{}
	wg       sync.WaitGroup
}

// Start listens on a free loopback port and forwards to target(). A target that answers ""
// has no endpoint: the connection is closed at once.
func Start(target func() string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// To is Start with a fixed target.
func To(address string) (*Proxy, error) { return Start(func() string { return address }) }

// Addr is the proxy's address, host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Delay holds every forwarded chunk for d before it is written (0: none).
func (p *Proxy) Delay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

// Stall holds every byte in both directions of every connection, open or new, until Flow:
// nothing is closed, so neither side notices but by its own timeouts.
func (p *Proxy) Stall() {
	p.mu.Lock()
	p.stalled = true
	p.mu.Unlock()
}

// Flow ends a Stall: held bytes go on in order.
func (p *Proxy) Flow() {
	p.mu.Lock()
	p.stalled = false
	p.cond.Broadcast()
	p.mu.Unlock()
}

// Refuse closes new connections at once while on (a partition both sides see).
func (p *Proxy) Refuse(on bool) {
	p.mu.Lock()
	p.refusing = on
	p.mu.Unlock()
}

// Reset closes every open connection with a TCP reset; new ones are forwarded as before.
func (p *Proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		reset(c)
	}
}

// Heal ends every fault: no delay, no stall, no refusal.
func (p *Proxy) Heal() {
	p.mu.Lock()
	p.delay, p.stalled, p.refusing = 0, false, false
	p.cond.Broadcast()
	p.mu.Unlock()
}

// Close stops accepting, closes every connection and waits for the forwarding to end.
func (p *Proxy) Close() {
	p.ln.Close()
	p.mu.Lock()
	p.closed, p.stalled = true, false
	p.cond.Broadcast()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refusing := p.refusing || p.closed
		p.mu.Unlock()
		target := ""
		if !refusing {
			target = p.target()
		}
		if target == "" {
			reset(in)
			continue
		}
		out, err := net.DialTimeout("tcp", target, 5*time.Second)
		if err != nil {
			reset(in)
			continue
		}
		if !p.track(in, out) {
			in.Close()
			out.Close()
			return
		}
		p.wg.Add(1)
		go p.forward(in, out)
	}
}

func (p *Proxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	for _, c := range conns {
		p.conns[c] = struct{}{}
	}
	return true
}

// forward runs both directions of one connection and closes both sides when both ended.
func (p *Proxy) forward(in, out net.Conn) {
	defer p.wg.Done()
	done := make(chan struct{}, 2)
	go func() { p.pipe(out, in); done <- struct{}{} }()
	go func() { p.pipe(in, out); done <- struct{}{} }()
	<-done
	<-done
	p.mu.Lock()
	delete(p.conns, in)
	delete(p.conns, out)
	p.mu.Unlock()
	in.Close()
	out.Close()
}

// pipe copies src to dst chunk by chunk, each held while the proxy stalls and delayed by
// the current delay. The end of src half-closes dst; a failure closes both sides, which
// ends the other direction too.
func (p *Proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, copyBuffer)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for p.stalled {
				p.cond.Wait()
			}
			delay, closed := p.delay, p.closed
			p.mu.Unlock()
			if closed {
				return
			}
			if delay > 0 {
				time.Sleep(delay)
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				src.Close()
				dst.Close()
				return
			}
		}
		if err != nil {
			if tc, ok := dst.(*net.TCPConn); ok && errors.Is(err, io.EOF) {
				_ = tc.CloseWrite()
				return
			}
			src.Close()
			dst.Close()
			return
		}
	}
}

// reset closes c with a TCP RST rather than a FIN.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	c.Close()
}
