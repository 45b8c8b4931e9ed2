package process

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Timing of the reaper.
const (
	// killPollInterval is how often remaining descendants are searched for and killed while
	// the reaper waits for the last one.
	killPollInterval = 10 * time.Millisecond
	// maxReapTime bounds the kill-and-reap phase so that a call ends within its timeout
	// plus a second: every round kills the whole descendant tree at once, so even a
	// thousand-deep chain of setsid'd processes goes in one or two rounds; a fork bomb
	// outrunning this is bounded by the Pod's pid limit.
	maxReapTime = 800 * time.Millisecond
	// drainTime bounds reading what is left in the output pipes once every descendant is
	// reaped: a process outside the command's tree (another command that opened
	// /proc/<pid>/fd/1) cannot hold the call open.
	drainTime = 100 * time.Millisecond
)

// reapChildren is the reaper: wait4(-1) collects the command and every descendant
// reparented to us (the helper is a subreaper), until none is left.
func (c *command) reapChildren() {
	defer close(c.allReaped)
	for {
		var ws unix.WaitStatus
		got, err := unix.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil { // ECHILD: nothing left
			return
		}
		if got == c.pid {
			c.exited <- ws
		}
	}
}

// ending is how the wait for the command ended.
type ending struct {
	status    unix.WaitStatus
	timedOut  bool
	cancelled bool
	// stopped: the cancel was a stop (SIGTERM first), which the command may have handled.
	stopped bool
}

// wait returns once the command itself has exited. When the timeout passes or the call is
// cancelled first, it kills the whole tree and keeps waiting for the command's status, so
// that the status is always the kernel's. A stop sends SIGTERM to the group and kills the
// tree once its grace has passed.
func (c *command) wait(timeout time.Duration, cancel <-chan struct{}, stop <-chan time.Duration) ending {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var graceEnded <-chan time.Time
	var e ending
	for {
		select {
		case e.status = <-c.exited:
			return e
		case <-timer.C:
			if !e.cancelled {
				e.timedOut = true
			}
			killDescendants(c.pid)
		case <-cancel:
			e.cancelled = true
			killDescendants(c.pid)
			cancel = nil // closed: would fire on every pass
		case grace := <-stop:
			e.cancelled, e.stopped = true, true
			stop = nil // one stop is enough
			_ = unix.Kill(-c.pid, unix.SIGTERM)
			g := time.NewTimer(grace)
			defer g.Stop()
			graceEnded = g.C
		case <-graceEnded:
			killDescendants(c.pid)
		}
	}
}

// reap kills whatever the command left behind until the reaper has collected it all, within
// maxReapTime. It returns the result's message when some descendant outlived that bound.
func (c *command) reap() string {
	// The command is gone; nothing it started may outlive the call.
	deadline := time.After(maxReapTime)
	poll := time.NewTicker(killPollInterval)
	defer poll.Stop()
	for {
		killDescendants(c.pid)
		select {
		case <-c.allReaped:
			return ""
		case <-deadline:
			return "some descendants could not be reaped within " + maxReapTime.String()
		case <-poll.C:
		}
	}
}

// drain waits for both output copies to end, reading for at most drainTime more.
func (c *command) drain() {
	// Everything the command started is gone; whatever still holds a pipe open is not ours.
	_ = c.outR.SetReadDeadline(time.Now().Add(drainTime))
	if c.errR != nil {
		_ = c.errR.SetReadDeadline(time.Now().Add(drainTime))
	}
	<-c.copied
	<-c.copied
}

// killDescendants SIGKILLs the command's process group and every descendant of this helper,
// walking the whole tree from /proc in one round (processes that left the group with
// setsid included), so a chain of any depth dies at once rather than one level per round.
func killDescendants(pgid int) {
	_ = unix.Kill(-pgid, unix.SIGKILL)
	KillTrees(Children(os.Getpid())...)
}

// KillTrees SIGKILLs each of roots and every descendant of each, found from /proc in one
// walk. A session helper uses it for what an ended command left behind.
//
// Each process is stopped (SIGSTOP) before its children are read, and all are killed only
// once the walk is done: a stopped process neither exits nor forks, so its children stay
// its own while they are read. Killed first, a parent could die and hand its children to
// the subreaper before they were read, and they would live on.
func KillTrees(roots ...int) {
	seen := map[int]bool{}
	var tree []int
	queue := append([]int(nil), roots...)
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		if seen[pid] {
			continue
		}
		seen[pid] = true
		if unix.Kill(pid, unix.SIGSTOP) != nil {
			continue // gone already
		}
		tree = append(tree, pid)
		queue = append(queue, Children(pid)...)
	}
	for _, pid := range tree {
		_ = unix.Kill(pid, unix.SIGKILL)
	}
}

// Children lists the live children of pid from /proc.
func Children(pid int) []int {
	// The kernel's own lists (CONFIG_PROC_CHILDREN), one per thread: a child belongs to
	// the thread that forked it, and orphans are reparented to any live thread.
	if tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid)); err == nil {
		var out []int
		ok := false
		for _, t := range tasks {
			data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, t.Name()))
			if err != nil {
				continue
			}
			ok = true
			for _, f := range strings.Fields(string(data)) {
				if n, err := strconv.Atoi(f); err == nil {
					out = append(out, n)
				}
			}
		}
		if ok {
			return out
		}
	}
	return childrenByScan(pid)
}

// childrenByScan finds children by scanning every /proc/<pid>/stat (kernels without
// CONFIG_PROC_CHILDREN).
func childrenByScan(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// The command name may contain spaces and parentheses: fields follow the last ')'.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(stat[i+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			out = append(out, n)
		}
	}
	return out
}
