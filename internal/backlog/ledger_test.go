package backlog

import (
	"bytes"
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2/hpack"
)

func ledger(t *testing.T) (*Ledger, *Conn) {
	t.Helper()
	l, err := New(Config{ClientBytes: testBudget, ClientConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	l.maxWait = 200 * time.Millisecond
	server, client := net.Pipe()
	t.Cleanup(func() { client.Close() })
	c, err := l.Accept(server, "a")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return l, c
}

// headerBlock is a response header block naming a request id, as gRPC's encoder writes it
// (a fresh encoder per block: the decoder of c must have seen the same table, which it has
// when every block is written fresh and literal).
func headerBlock(t *testing.T, requestID string) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	enc.SetMaxDynamicTableSizeLimit(0)
	if err := enc.WriteField(hpack.HeaderField{Name: RequestIDHeader, Value: requestID, Sensitive: true}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Waiting is first come, first served, bounded in time and in number, and what a waiter
// gives up goes to those behind it.
func TestWaitingForRoom(t *testing.T) {
	l, c := ledger(t)
	ctx := t.Context()
	hold := c.Begin("hold")
	if err := hold.Reserve(ctx, testBudget-1); err != nil {
		t.Fatal(err)
	}
	// A large reservation waits, and small ones behind it wait for it (no starvation).
	big, small := c.Begin("big"), c.Begin("small")
	bigDone, smallDone := make(chan error, 1), make(chan error, 1)
	go func() { bigDone <- big.Reserve(ctx, testBudget/2) }()
	eventually(t, "waiters", func() bool { return l.Stats().Waits >= 1 })
	go func() { smallDone <- small.Reserve(ctx, 1) }()
	eventually(t, "waiters", func() bool { return l.Stats().Waits >= 2 })
	hold.Settle(testBudget / 2) // half goes back: exactly room for big, none for small
	if err := <-bigDone; err != nil {
		t.Fatalf("the first waiter: %v", err)
	}
	select {
	case err := <-smallDone:
		t.Fatalf("the second waiter passed the first's room: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	// Unserved for maxWait: refused, retryable, having taken nothing.
	if err := <-smallDone; !errors.Is(err, ErrFull) {
		t.Fatalf("a waiter without room: %v, want ErrFull", err)
	}
	if got := l.Stats().Bytes; got != testBudget {
		t.Fatalf("held %d, want %d", got, testBudget)
	}
	// Beyond maxWaiters, refused at once: long before a wait would end.
	l.maxWait = time.Minute
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range maxWaiters {
		go func() { _ = c.Begin("w").Reserve(cctx, 1) }()
	}
	eventually(t, "waiters", func() bool { return l.Stats().Waits >= 2+maxWaiters })
	start := time.Now()
	if err := c.Begin("one-more").Reserve(ctx, 1); !errors.Is(err, ErrFull) || time.Since(start) > l.maxWait/2 {
		t.Fatalf("a waiter beyond %d: %v after %s", maxWaiters, err, time.Since(start))
	}
	cancel()
	hold.Done()
	big.Done()
	eventually(t, "everything given back", func() bool { return l.Stats().Bytes == 0 })
}

// A call whose headers are written after its connection closed, or after its client reset
// the stream, counts nothing: nobody would ever free it.
func TestLateBindingCountsNothing(t *testing.T) {
	l, c := ledger(t)
	ctx := t.Context()
	out := outEvents{c}

	reset := c.Begin("reset")
	inEvents{c}.reset(3) // read before the headers went out
	if err := out.headers(3, headerBlock(t, "reset")); err != nil {
		t.Fatal(err)
	}
	if err := reset.Send(ctx, 1000); err != nil {
		t.Fatal(err)
	}
	reset.Done()
	if got := l.Stats().Bytes; got != 0 {
		t.Fatalf("a reset stream's answer holds %d bytes", got)
	}

	late := c.Begin("late")
	if err := late.Reserve(ctx, 500); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if err := out.headers(5, headerBlock(t, "late")); err != nil {
		t.Fatal(err)
	}
	if err := late.Send(ctx, 1000); !errors.Is(err, ErrNotTaken) {
		t.Fatalf("send on a closed connection: %v", err)
	}
	late.Done()
	if s := l.Stats(); s.Bytes != 0 || s.Clients != 0 || s.Inconsistencies != 0 {
		t.Fatalf("after the connection closed: %+v", s)
	}
}

// Giving back more than is held is counted and clamped, never a panic in the writer.
func TestOverReleaseIsClamped(t *testing.T) {
	l, c := ledger(t)
	k := c.Begin("k")
	if err := k.Reserve(t.Context(), 10); err != nil {
		t.Fatal(err)
	}
	l.release(c.a, 100)
	if s := l.Stats(); s.Inconsistencies != 1 || s.Bytes != 0 {
		t.Fatalf("%+v", s)
	}
}
