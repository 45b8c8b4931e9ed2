package process

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func threads(t *testing.T) int {
	t.Helper()
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(status)) {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no Threads line in /proc/self/status")
	return 0
}

// After ReserveThreads, as many blocking system calls at once as it reserved for, with
// every P busy, start no new thread: the runtime reuses the reserved ones.
func TestReservedThreadsAreReused(t *testing.T) {
	ReserveThreads()
	reserved := threads(t)
	if want := runtime.GOMAXPROCS(0) + spareThreads; reserved < want {
		t.Fatalf("%d threads after the reserve, want at least %d", reserved, want)
	}
	// spareThreads-1 blocking reads (the test's own goroutines keep a thread or two busy).
	var fds [][2]int
	for range spareThreads - 1 {
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil { // blocking: a read holds its thread
			t.Fatal(err)
		}
		fds = append(fds, p)
	}
	var wg sync.WaitGroup
	for _, p := range fds {
		wg.Go(func() {
			var b [1]byte
			_, _ = unix.Read(p[0], b[:])
		})
	}
	// Each read, once in the kernel, holds a thread of its own.
	waitReading(t, len(fds))
	during := threads(t)
	for _, p := range fds {
		_, _ = unix.Write(p[1], []byte{1})
	}
	wg.Wait()
	for _, p := range fds {
		unix.Close(p[0])
		unix.Close(p[1])
	}
	// One thread of slack: on a loaded machine (make test runs many test binaries at once)
	// the runtime can start an M for its own work — a GC worker's or a timer's goroutine
	// running while the reads hold the reserve — which is not a read's. Without reuse each
	// of the reads would start one.
	const slack = 1
	if during > reserved+slack {
		t.Fatalf("%d blocking reads started %d new threads beyond the %d reserved", len(fds), during-reserved, reserved)
	}
}

// waitReading waits until n of the process's threads are blocked in read(2), as
// /proc/self/task/*/syscall shows (its first field is the system call's number).
func waitReading(t *testing.T, n int) {
	t.Helper()
	prefix := fmt.Sprintf("%d ", unix.SYS_READ)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(10 * time.Second)
	for {
		tasks, _ := filepath.Glob("/proc/self/task/*/syscall")
		reading := 0
		for _, task := range tasks {
			if b, err := os.ReadFile(task); err == nil && strings.HasPrefix(string(b), prefix) {
				reading++
			}
		}
		if reading >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d reads in the kernel after 10s", reading, n)
		}
		<-tick.C
	}
}
