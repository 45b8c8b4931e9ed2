package faultproxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// echo serves line echoes on a loopback port until the test ends.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

func start(t *testing.T, target func() string) *Proxy {
	t.Helper()
	p, err := Start(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// roundTrip sends a line and reads it back within d.
func roundTrip(c net.Conn, r *bufio.Reader, d time.Duration) (time.Duration, error) {
	began := time.Now()
	_ = c.SetDeadline(began.Add(d))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return 0, err
	}
	line, err := r.ReadString('\n')
	if err == nil && line != "ping\n" {
		err = errors.New("echoed " + line)
	}
	return time.Since(began), err
}

func dial(t *testing.T, p *Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

func TestFaults(t *testing.T) {
	p := start(t, func() string { return echo(t) })
	c, r := dial(t, p)
	if _, err := roundTrip(c, r, 2*time.Second); err != nil {
		t.Fatalf("healthy: %v", err)
	}

	// Latency: each direction's chunk waits.
	p.Delay(100 * time.Millisecond)
	if took, err := roundTrip(c, r, 2*time.Second); err != nil || took < 200*time.Millisecond {
		t.Fatalf("delayed: %s %v, want ≥ 200ms", took, err)
	}
	p.Delay(0)

	// A stall holds bytes and closes nothing; the flow delivers them in order.
	p.Stall()
	if _, err := roundTrip(c, r, 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("stalled: %v, want a timeout", err)
	}
	p.Flow()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if line, err := r.ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("after the stall, the held line: %q %v", line, err)
	}

	// A reset ends the open connection; a new one works.
	p.Reset()
	if _, err := roundTrip(c, r, 2*time.Second); err == nil {
		t.Fatal("a reset connection still echoed")
	}
	c2, r2 := dial(t, p)
	if _, err := roundTrip(c2, r2, 2*time.Second); err != nil {
		t.Fatalf("after a reset: %v", err)
	}

	// Refused: a new connection is closed at once, an open one goes on; healed, all flow.
	p.Refuse(true)
	if c3, err := net.Dial("tcp", p.Addr()); err == nil { // else reset before the dial returned
		if _, err := roundTrip(c3, bufio.NewReader(c3), 2*time.Second); err == nil {
			t.Fatal("a refused connection echoed")
		}
		c3.Close()
	}
	if _, err := roundTrip(c2, r2, 2*time.Second); err != nil {
		t.Fatalf("an open connection while refusing: %v", err)
	}
	p.Heal()
	c4, r4 := dial(t, p)
	if _, err := roundTrip(c4, r4, 2*time.Second); err != nil {
		t.Fatalf("healed: %v", err)
	}
}

// No endpoint: the connection is closed at once, as a Service with none ready refuses.
func TestNoEndpoint(t *testing.T) {
	p := start(t, func() string { return "" })
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		return // reset before the dial returned
	}
	defer c.Close()
	if _, err := roundTrip(c, bufio.NewReader(c), 2*time.Second); err == nil {
		t.Fatal("echoed without an endpoint")
	}
}

// A half-close goes through: the server sees the end of the request and still answers.
func TestHalfClose(t *testing.T) {
	p := start(t, func() string { return echo(t) })
	c, _ := dial(t, p)
	if _, err := c.Write([]byte("all of it")); err != nil {
		t.Fatal(err)
	}
	_ = c.(*net.TCPConn).CloseWrite()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "all of it" {
		t.Fatalf("after a half-close: %q %v", got, err)
	}
}
