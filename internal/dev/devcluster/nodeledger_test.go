package devcluster

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// One holder at a time: a second taker waits (and gives up when its context ends), and gets
// the lock once the first releases it; the file names the holder.
func TestLockFileKeepsOneHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "node.lock")
	var said []string
	logf := func(f string, a ...any) { said = append(said, f) }
	first, err := lockFile(t.Context(), path, logf)
	if err != nil {
		t.Fatal(err)
	}
	if holder, _ := os.ReadFile(path); strings.TrimSpace(string(holder)) != strconv.Itoa(os.Getpid()) {
		t.Fatalf("the lock file names %q, not this process", holder)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*nodeLockPoll)
	defer cancel()
	if second, err := lockFile(ctx, path, logf); !errors.Is(err, context.DeadlineExceeded) {
		second.release()
		t.Fatalf("a second holder got the lock beside the first: %v", err)
	}
	if len(said) != 1 {
		t.Fatalf("the waiting taker said %d things, want that it waits once: %v", len(said), said)
	}
	got := make(chan error, 1)
	go func() {
		l, err := lockFile(t.Context(), path, logf)
		if err == nil {
			l.release()
		}
		got <- err
	}()
	first.release()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the lock was not taken after its release")
	}
}

// A ledger round-trips through its encoding, and one with a field this version does not know
// (a change it would not undo) is refused.
func TestLedgerDecodesStrictly(t *testing.T) {
	dir := t.TempDir()
	l := &nodeLedger{PID: 1, StateDir: filepath.Join(dir, "absent"), Sysctls: map[string]string{}}
	data, err := l.marshal()
	if err != nil {
		t.Fatal(err)
	}
	back, err := unmarshalLedger(data)
	if err != nil || back.PID != 1 || back.StateDir != l.StateDir {
		t.Fatalf("round trip: %+v, %v", back, err)
	}
	if _, err := unmarshalLedger([]byte(`{"pid": 1, "unknown": true}`)); err == nil {
		t.Fatal("a ledger with an unknown field was read")
	}
}
