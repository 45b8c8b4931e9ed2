package process

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
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
	// defaultPath is used when neither the helper nor the request sets PATH.
	defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// Limits are the request's bounds (from the profile).
type Limits struct {
	// MaxOutputBytes caps each output stream (head + tail) and stdin.
	MaxOutputBytes uint64
	// MaxDuration caps the timeout.
	MaxDuration time.Duration
}

// Options configure Run.
type Options struct {
	Limits Limits
	// Dir is the working directory, already resolved beneath the workspace root.
	Dir string
	// Environ is the base environment (the helper's own); the request's variables override it.
	Environ []string
	// Cancel is closed when the call is cancelled (EOF on the helper's stdin).
	Cancel <-chan struct{}
	// Dir, when empty, starts the command in the helper's working directory: the helper
	// fchdir's to the kernel-resolved working directory first (see helper.runCommand), so
	// no path string is ever resolved again.
}

// EnableSubreaper makes this process the reaper of its orphaned descendants. The helper
// calls it once before Run.
func EnableSubreaper() error {
	return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
}

// Run runs the command and returns its result once it and every descendant are gone.
func Run(spec *executionv1.CommandSpec, opts Options) (*executionv1.CommandResult, error) {
	lim := opts.Limits
	if lim.MaxOutputBytes == 0 || lim.MaxOutputBytes > MaxOutputBytesCeiling {
		return nil, invalidf("max_command_bytes must be 1..%d", MaxOutputBytesCeiling)
	}
	if lim.MaxDuration < MinTimeout || lim.MaxDuration > MaxDurationCeiling {
		return nil, invalidf("max_command_millis must be within [%s, %s]", MinTimeout, MaxDurationCeiling)
	}
	argv, timeout, err := validate(spec, lim)
	if err != nil {
		return nil, err
	}
	env := mergeEnv(opts.Environ, spec.GetEnvironment())
	started := time.Now()
	res := &executionv1.CommandResult{StartedAt: timestamppb.New(started), ExitCode: -1}
	program, err := lookPath(argv[0], envValue(env, "PATH"))
	if err != nil {
		return startFailed(res, started, err), nil
	}

	stdout, stderr := newCapture(int(lim.MaxOutputBytes)), newCapture(int(lim.MaxOutputBytes))
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	oomBefore, oomKnown := oomKills()
	proc, err := os.StartProcess(program, argv, &os.ProcAttr{
		Dir:   opts.Dir,
		Env:   env,
		Files: []*os.File{stdinR, outW, errW},
		Sys:   &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
	})
	// The child holds its ends; ours must close so EOF arrives when the last writer is gone.
	stdinR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		stdinW.Close()
		outR.Close()
		errR.Close()
		return startFailed(res, started, err), nil
	}
	pid := proc.Pid
	defer proc.Release()

	go func() {
		_, _ = stdinW.Write(spec.GetStdin()) // EPIPE when the command ignores stdin: fine
		stdinW.Close()
	}()
	copied := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(stdout, outR); outR.Close(); copied <- struct{}{} }()
	go func() { _, _ = io.Copy(stderr, errR); errR.Close(); copied <- struct{}{} }()

	// The reaper: wait4(-1) collects the command and every descendant reparented to us.
	mainStatus := make(chan unix.WaitStatus, 1)
	allReaped := make(chan struct{})
	go func() {
		defer close(allReaped)
		for {
			var ws unix.WaitStatus
			got, err := unix.Wait4(-1, &ws, 0, nil)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil { // ECHILD: nothing left
				return
			}
			if got == pid {
				mainStatus <- ws
			}
		}
	}()

	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var ws unix.WaitStatus
	var timedOut, cancelled bool
wait:
	for {
		select {
		case ws = <-mainStatus:
			break wait
		case <-timer.C:
			timedOut = true
			killDescendants(pid)
		case <-opts.Cancel:
			cancelled = true
			killDescendants(pid)
			opts.Cancel = nil
		}
	}
	// The command is gone; nothing it started may outlive the call.
	reapDeadline := time.After(maxReapTime)
	poll := time.NewTicker(killPollInterval)
	defer poll.Stop()
reap:
	for {
		killDescendants(pid)
		select {
		case <-allReaped:
			break reap
		case <-reapDeadline:
			res.Message = "some descendants could not be reaped within " + maxReapTime.String()
			break reap
		case <-poll.C:
		}
	}
	// Everything the command started is gone; whatever still holds a pipe open is not ours.
	_ = outR.SetReadDeadline(time.Now().Add(drainTime))
	_ = errR.SetReadDeadline(time.Now().Add(drainTime))
	<-copied
	<-copied
	res.Duration = durationpb.New(time.Since(started))
	res.Stdout, res.Stderr = stdout.result(), stderr.result()
	switch {
	case timedOut:
		res.State, res.Signal = executionv1.CommandState_COMMAND_STATE_TIMED_OUT, int32(unix.SIGKILL)
	case cancelled:
		res.State, res.Signal = executionv1.CommandState_COMMAND_STATE_CANCELLED, int32(unix.SIGKILL)
	case ws.Exited() && ws.ExitStatus() == 0:
		res.State, res.ExitCode = executionv1.CommandState_COMMAND_STATE_SUCCEEDED, 0
	case ws.Exited():
		res.State, res.ExitCode = executionv1.CommandState_COMMAND_STATE_FAILED, int32(ws.ExitStatus())
	case ws.Signaled():
		res.State, res.Signal = executionv1.CommandState_COMMAND_STATE_SIGNALED, int32(ws.Signal())
		if after, ok := oomKills(); ok && oomKnown && after > oomBefore && ws.Signal() == unix.SIGKILL {
			res.State = executionv1.CommandState_COMMAND_STATE_OUT_OF_MEMORY
		}
	}
	res.Receipt = Receipt(res)
	return res, nil
}

func startFailed(res *executionv1.CommandResult, started time.Time, err error) *executionv1.CommandResult {
	res.State = executionv1.CommandState_COMMAND_STATE_START_FAILED
	res.Message = startMessage(err)
	res.Duration = durationpb.New(time.Since(started))
	res.Stdout, res.Stderr = &executionv1.CapturedOutput{}, &executionv1.CapturedOutput{}
	res.Receipt = Receipt(res)
	return res
}

func startMessage(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return TruncateUTF8("cannot start: "+err.Error(), maxMessageBytes)
}

// Receipt is "sha256:" + hex of SHA-256 over the deterministic protobuf encoding of the
// result with its receipt field empty.
func Receipt(res *executionv1.CommandResult) string {
	c := proto.Clone(res).(*executionv1.CommandResult)
	c.Receipt = ""
	data, err := proto.MarshalOptions{Deterministic: true}.Marshal(c)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// killDescendants SIGKILLs the command's process group and every descendant of this helper,
// walking the whole tree from /proc in one round (processes that left the group with
// setsid included), so a chain of any depth dies at once rather than one level per round.
func killDescendants(pgid int) {
	_ = unix.Kill(-pgid, unix.SIGKILL)
	seen := map[int]bool{}
	queue := []int{os.Getpid()}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children(pid) {
			if !seen[c] {
				seen[c] = true
				_ = unix.Kill(c, unix.SIGKILL)
				queue = append(queue, c)
			}
		}
	}
}

// children lists the live children of pid from /proc.
func children(pid int) []int {
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

// oomKills reads the oom_kill counter of this process's memory cgroup: memory.events on
// cgroup v2, memory.oom_control on v1 (both count kills since the cgroup was created).
func oomKills() (uint64, bool) {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(data), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		var file string
		switch {
		case parts[0] == "0" && parts[1] == "":
			file = filepath.Join("/sys/fs/cgroup", filepath.Clean("/"+parts[2]), "memory.events")
		case slices.Contains(strings.Split(parts[1], ","), "memory"):
			file = filepath.Join("/sys/fs/cgroup/memory", filepath.Clean("/"+parts[2]), "memory.oom_control")
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

func parseOOMKills(events string) (uint64, bool) {
	for _, line := range strings.Split(events, "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// mergeEnv overlays the request's variables on the base environment.
func mergeEnv(base []string, vars []*executionv1.EnvironmentVariable) []string {
	idx := map[string]int{}
	env := make([]string, 0, len(base)+len(vars))
	for _, kv := range base {
		name, _, _ := strings.Cut(kv, "=")
		if _, dup := idx[name]; dup || !EnvAllowed(name) {
			continue
		}
		idx[name] = len(env)
		env = append(env, kv)
	}
	for _, v := range vars {
		kv := v.GetName() + "=" + v.GetValue()
		if i, ok := idx[v.GetName()]; ok {
			env[i] = kv
			continue
		}
		idx[v.GetName()] = len(env)
		env = append(env, kv)
	}
	if _, ok := idx["PATH"]; !ok {
		env = append(env, "PATH="+defaultPath)
	}
	return env
}

func envValue(env []string, name string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, name+"="); ok {
			return v
		}
	}
	return ""
}

// lookPath finds an executable as execvp would, using the command's PATH.
func lookPath(name, path string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("executable %q not found in PATH", name)
}

// maxMessageBytes bounds messages in results (the API documents 1024).
const maxMessageBytes = 1024

// TruncateUTF8 cuts s to at most n bytes without splitting a character, and replaces invalid
// UTF-8 (a protobuf string must be valid, or the response could not be encoded at all).
func TruncateUTF8(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
