// Package quiesce stops a workspace's processes while a snapshot is cut, and continues them
// after (docs/snapshots.md "Crash-consistent: quiesced for the cut").
//
// Invariants:
//   - Only processes the helper may signal are touched (its own user's, in its own PID
//     namespace), never PID 1 (the executor's pause) and never the quiescing helper itself.
//   - A process is named by pid and start time: one that exited and whose pid was reused is
//     never continued (nor was it stopped).
//   - Stopping is repeated until a pass finds nothing new running, bounded: processes
//     forking faster than the passes fail the quiesce, and everything stopped is continued.
//   - Whatever ends the hold — its caller, its deadline, or a later helper that finds the
//     hold's marker expired (the quiescer killed outright) — continues every process it
//     stopped.
package quiesce

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Bounds of a stop.
const (
	// maxPasses bounds the passes over /proc: a pass that stops nothing new ends the stop.
	maxPasses = 50
	// settleTime bounds the wait for SIGSTOP to take effect on every process stopped (it
	// is delivered at the process's next return to user space).
	settleTime = 2 * time.Second
	settlePoll = 5 * time.Millisecond
)

// Proc names a process across pid reuse.
type Proc struct {
	PID        int    `json:"pid"`
	StartTicks uint64 `json:"startTicks"`
}

// Procs lists processes; Stop reads /proc through it (a test lists its own children).
type Procs func() ([]int, error)

// ProcDir lists the processes /proc shows: every process of the PID namespace.
func ProcDir() ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, pid)
		}
	}
	return out, nil
}

// Stop stops every process list names but PID 1 and the caller, pass after pass, until a
// pass stops nothing new, every thread of every process stopped is seen stopped, and a
// listing taken after that finds nothing new (a fork under way when its parent was stopped
// completes: its child is caught by that listing). A process stopped already (a user's ^Z,
// a debugger's) is left as it is and never continued. On failure it continues what it
// stopped and returns the error.
func Stop(list Procs) ([]Proc, error) {
	self := os.Getpid()
	stopped := map[int]Proc{}
	already := map[int]uint64{}
	fail := func(err error) ([]Proc, error) {
		Continue(values(stopped))
		return nil, err
	}
	for range maxPasses {
		pids, err := list()
		if err != nil {
			return fail(fmt.Errorf("quiesce: list processes: %w", err))
		}
		fresh := 0
		for _, pid := range pids {
			if pid <= 1 || pid == self {
				continue
			}
			state, ticks, ok := stat(pid)
			if !ok || state == 'X' {
				continue // gone
			}
			if p, ok := stopped[pid]; ok {
				if ticks == p.StartTicks {
					continue // stopped by an earlier pass
				}
				delete(stopped, pid) // its pid reused by a new process: the old one is gone
			}
			if t, ok := already[pid]; ok && t == ticks {
				continue
			}
			if state == 'T' || state == 't' {
				already[pid] = ticks
				continue
			}
			// A zombie leader may still have live threads: the signal reaches the whole
			// thread group, so it is sent whatever the leader's state.
			switch err := unix.Kill(pid, unix.SIGSTOP); {
			case errors.Is(err, unix.ESRCH):
				continue
			case err != nil:
				return fail(fmt.Errorf("quiesce: stop process %d: %w", pid, err))
			}
			// Read again: a pid reused between the read and the signal is the process
			// signalled, and the one to continue.
			if _, now, ok := stat(pid); ok {
				ticks = now
			}
			stopped[pid] = Proc{PID: pid, StartTicks: ticks}
			fresh++
		}
		if fresh > 0 {
			continue
		}
		if err := settle(stopped); err != nil {
			return fail(err)
		}
		if news, err := unseen(list, self, stopped, already); err != nil {
			return fail(err)
		} else if !news {
			return values(stopped), nil
		}
	}
	return fail(fmt.Errorf("quiesce: processes kept starting through %d passes", maxPasses))
}

// unseen reports whether list now names a live process that is neither stopped nor was
// stopped already.
func unseen(list Procs, self int, stopped map[int]Proc, already map[int]uint64) (bool, error) {
	pids, err := list()
	if err != nil {
		return false, fmt.Errorf("quiesce: list processes: %w", err)
	}
	for _, pid := range pids {
		if pid <= 1 || pid == self {
			continue
		}
		state, ticks, ok := stat(pid)
		if !ok || state == 'X' {
			continue
		}
		if p, ok := stopped[pid]; ok && p.StartTicks == ticks {
			continue
		}
		if t, ok := already[pid]; ok && t == ticks {
			continue
		}
		return true, nil
	}
	return false, nil
}

// settle waits until every thread of every stopped process is seen stopped (or gone).
func settle(stopped map[int]Proc) error {
	deadline := time.Now().Add(settleTime)
	for {
		waiting := 0
		for pid, p := range stopped {
			if _, ticks, ok := stat(pid); ok && ticks == p.StartTicks && !allStopped(pid) {
				waiting++
			}
		}
		if waiting == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("quiesce: %d processes did not stop within %s", waiting, settleTime)
		}
		time.Sleep(settlePoll)
	}
}

// allStopped reports whether every thread of pid is stopped or dead.
func allStopped(pid int) bool {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return true // gone
	}
	for _, t := range tasks {
		data, err := os.ReadFile(dir + "/" + t.Name() + "/stat")
		if err != nil {
			continue
		}
		if state, ok := stateOf(data); ok && state != 'T' && state != 't' && state != 'Z' && state != 'X' {
			return false
		}
	}
	return true
}

// Continue continues each process that is still the one stopped (same pid and start time).
func Continue(procs []Proc) int {
	n := 0
	for _, p := range procs {
		if _, ticks, ok := stat(p.PID); ok && ticks == p.StartTicks && unix.Kill(p.PID, unix.SIGCONT) == nil {
			n++
		}
	}
	return n
}

func values(m map[int]Proc) []Proc {
	out := make([]Proc, 0, len(m))
	for _, p := range m {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Proc) int { return a.PID - b.PID })
	return out
}

// stat reads a process's state and start time (clock ticks since boot) from
// /proc/<pid>/stat.
func stat(pid int) (state byte, startTicks uint64, ok bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	f, ok := statFields(data)
	if !ok || len(f) < 20 {
		return 0, 0, false
	}
	// f[0] is field 3 (state); field 22 (starttime) is f[19].
	t, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return 0, 0, false
	}
	return f[0][0], t, true
}

// stateOf is the state field of a stat file's content.
func stateOf(data []byte) (byte, bool) {
	f, ok := statFields(data)
	if !ok {
		return 0, false
	}
	return f[0][0], true
}

// statFields are a stat file's fields from the third (state) on: the command name before
// them may hold spaces and parentheses, so they follow the last ')'.
func statFields(data []byte) ([]string, bool) {
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return nil, false
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) == 0 || len(f[0]) != 1 {
		return nil, false
	}
	return f, true
}
