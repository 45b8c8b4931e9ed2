package process

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// classify sets the result's state, exit code and signal from how the command ended. A kill
// by the helper (timeout, cancel) wins over the status it caused. oomKilled is asked only
// about a SIGKILL the helper did not send: the kernel's OOM killer sends the same signal.
func classify(res *executionv1.CommandResult, e ending, oomKilled func() bool) {
	ws := e.status
	switch {
	case e.timedOut:
		res.State, res.Signal = executionv1.CommandState_COMMAND_STATE_TIMED_OUT, int32(unix.SIGKILL)
	case e.cancelled:
		// Killed by the helper (SIGKILL), or ended by a stop's SIGTERM; a command that
		// handled the SIGTERM and exited still ended because it was cancelled.
		res.State, res.Signal = executionv1.CommandState_COMMAND_STATE_CANCELLED, int32(unix.SIGKILL)
		if ws.Signaled() {
			res.Signal = int32(ws.Signal())
		} else if e.stopped {
			res.Signal = int32(unix.SIGTERM)
		}
	case ws.Exited() && ws.ExitStatus() == 0:
		res.State, res.ExitCode = executionv1.CommandState_COMMAND_STATE_SUCCEEDED, 0
	case ws.Exited():
		res.State, res.ExitCode = executionv1.CommandState_COMMAND_STATE_FAILED, int32(ws.ExitStatus())
	case ws.Signaled():
		res.State, res.Signal = executionv1.CommandState_COMMAND_STATE_SIGNALED, int32(ws.Signal())
		if ws.Signal() == unix.SIGKILL && oomKilled() {
			res.State = executionv1.CommandState_COMMAND_STATE_OUT_OF_MEMORY
		}
	}
}

// oomCount is the memory cgroup's oom_kill counter at one moment; known is false where the
// counter cannot be read (no memory controller visible).
type oomCount struct {
	n     uint64
	known bool
}

func readOOMKills() oomCount {
	n, ok := oomKills()
	return oomCount{n: n, known: ok}
}

// grew reports whether the kernel has OOM-killed something in this cgroup since c was read.
// The counter is the cgroup's, not the command's: a kill elsewhere in the Pod's cgroup
// during the command counts too.
func (c oomCount) grew() bool {
	after := readOOMKills()
	return c.known && after.known && after.n > c.n
}

// oomKills reads the oom_kill counter of this process's memory cgroup: memory.events on
// cgroup v2, memory.oom_control on v1 (both count kills since the cgroup was created).
func oomKills() (uint64, bool) {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return 0, false
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(data), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		var file string
		switch {
		case parts[0] == "0" && parts[1] == "":
			file = cgroupFile(string(mounts), "cgroup2", "", parts[2], "memory.events")
		case slices.Contains(strings.Split(parts[1], ","), "memory"):
			file = cgroupFile(string(mounts), "cgroup", "memory", parts[2], "memory.oom_control")
		default:
			continue
		}
		if events, err := os.ReadFile(file); err == nil {
			if n, ok := parseOOMKills(string(events)); ok {
				return n, true
			}
		}
	}
	return 0, false
}

// cgroupFile is the path of a file of cgroup cgPath (as /proc/self/cgroup names it) through
// the hierarchy's mount. In a container the mount's root is the container's own cgroup (a
// v1 bind mount of it, or a v2 cgroup namespace): /proc/self/cgroup's path is made relative
// to that root (mountinfo's fourth field). Without a matching mount, the conventional place
// under /sys/fs/cgroup.
func cgroupFile(mountinfo, fstype, controller, cgPath, name string) string {
	cgPath = filepath.Clean("/" + cgPath)
	for _, line := range strings.Split(mountinfo, "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 3 || g[0] != fstype {
			continue
		}
		if controller != "" && !slices.Contains(strings.Split(g[2], ","), controller) {
			continue
		}
		root, mountPoint := filepath.Clean(f[3]), f[4]
		rel := cgPath
		if root != "/" {
			if cgPath != root && !strings.HasPrefix(cgPath, root+"/") {
				continue
			}
			rel = "/" + strings.TrimPrefix(cgPath, root)
		}
		return filepath.Join(mountPoint, rel, name)
	}
	if fstype == "cgroup2" {
		return filepath.Join("/sys/fs/cgroup", cgPath, name)
	}
	return filepath.Join("/sys/fs/cgroup", controller, cgPath, name)
}

func parseOOMKills(events string) (uint64, bool) {
	for _, line := range strings.Split(events, "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}
