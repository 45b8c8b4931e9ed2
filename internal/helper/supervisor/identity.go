package supervisor

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"

	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// ownPIDNamespace is this process's PID namespace as the kernel names it ("pid:[4026531836]").
func ownPIDNamespace() string {
	ns, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return ""
	}
	return ns
}

// procStat reads a process's state and start time (in clock ticks since boot) from
// /proc/<pid>/stat, which every process may read.
func procStat(pid int) (state byte, startTicks uint64, ok bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, false
	}
	// The command name may hold spaces and parentheses: the fields follow the last ')'.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(string(data[i+1:]))
	// f[0] is field 3 (state); field 22 (starttime) is f[19].
	if len(f) < 20 || len(f[0]) != 1 {
		return 0, 0, false
	}
	t, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return 0, 0, false
	}
	return f[0][0], t, true
}

// identify names a live process for a record.
func identify(pid int) *helperv1.Supervisor {
	_, ticks, _ := procStat(pid)
	return &helperv1.Supervisor{Pid: int32(pid), StartTicks: ticks, PidNamespace: ownPIDNamespace()}
}

// alive reports whether a record's supervisor still runs: in this PID namespace (a replaced
// executor's is another, and none of its processes are left), with that pid and that start
// time (the kernel reuses pids), and not a zombie (it has exited, its final record written).
func alive(s *helperv1.Supervisor) bool {
	if s.GetPid() <= 0 || s.GetPidNamespace() == "" || s.GetPidNamespace() != ownPIDNamespace() {
		return false
	}
	state, ticks, ok := procStat(int(s.GetPid()))
	return ok && ticks == s.GetStartTicks() && state != 'Z' && state != 'X'
}
