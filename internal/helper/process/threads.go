package process

import (
	"runtime"
	"sync"
)

// spareThreads is how many threads beyond GOMAXPROCS ReserveThreads starts: room for the
// helper's blocking system calls at once (its stdin read, its stdout write, the reaper's
// wait4, a signal) with some to spare. A helper was seen with up to 8 threads in all.
const spareThreads = 6

// ReserveThreads makes the Go runtime start the OS threads the helper will need, now, while
// the executor's process limit still has room. The runtime starts threads on demand and
// treats a failed clone as fatal (`newosproc`, exit 2): a helper whose command fills the
// Pod's pid limit (a fork bomb) would otherwise die when it next needs a thread — while
// killing that very command — and leave its caller an unknown outcome instead of a result.
// Idle threads are kept by the runtime and reused, never given back.
func ReserveThreads() {
	n := runtime.GOMAXPROCS(0) + spareThreads
	var locked, done sync.WaitGroup
	release := make(chan struct{})
	locked.Add(n)
	for range n {
		done.Go(func() {
			// A goroutine that blocks while locked keeps its thread, so the runtime starts
			// another for the next; unlocked before it returns, the thread goes idle
			// instead of exiting with it.
			runtime.LockOSThread()
			locked.Done()
			<-release
			runtime.UnlockOSThread()
		})
	}
	locked.Wait()
	close(release)
	done.Wait()
}
