package devcluster

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
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

// In a shared directory the node created, undo removes what is the node's — sockets, links
// into its directories, files named for its network or one of its sandboxes, directories
// left empty — and keeps, and reports, what another program put there meanwhile.
func TestRemoveCreatedKeepsWhatIsNotTheNodes(t *testing.T) {
	root := t.TempDir()
	state, logs, shared := filepath.Join(root, "state"), filepath.Join(root, "logs"), filepath.Join(root, "shared")
	sandbox := "2f4aad93ccf09eae03e7bd459d5fbf090e3136bd8211bb7dc0bfed009d1ffbff"
	for _, d := range []string{filepath.Join(state, "containerd", "state", "io.containerd.grpc.v1.cri", "sandboxes", sandbox), logs,
		filepath.Join(shared, "s"), filepath.Join(shared, "results"), filepath.Join(shared, "empty", "deeper")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	l := &nodeLedger{StateDir: state, LogDir: logs}
	sock, err := net.Listen("unix", filepath.Join(shared, "s", "0123abcd"))
	if err != nil {
		t.Fatal(err)
	}
	sock.(*net.UnixListener).SetUnlinkOnClose(false)
	sock.Close()
	write := func(p string) {
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(shared, "results", "cni-loopback-"+sandbox+"-lo"))
	write(filepath.Join(shared, "results", cniNetwork+"-abc-eth0"))
	foreign := filepath.Join(shared, "results", "docker-bridge-ffff-eth0")
	write(foreign)
	for link, target := range map[string]string{"ours.log": filepath.Join(logs, "pod.log"), "theirs.log": "/var/log/elsewhere.log"} {
		if err := os.Symlink(target, filepath.Join(shared, link)); err != nil {
			t.Fatal(err)
		}
	}
	err = l.removeCreated(shared, l.sandboxIDs())
	if err == nil || !strings.Contains(err.Error(), foreign) || !strings.Contains(err.Error(), "theirs.log") {
		t.Fatalf("want the foreign file and link reported, got %v", err)
	}
	var left []string
	_ = filepath.WalkDir(shared, func(p string, d os.DirEntry, err error) error {
		if err == nil {
			left = append(left, strings.TrimPrefix(p, shared))
		}
		return nil
	})
	want := []string{"", "/results", "/results/docker-bridge-ffff-eth0", "/theirs.log"}
	if !slices.Equal(left, want) {
		t.Fatalf("left %v, want %v", left, want)
	}
}
