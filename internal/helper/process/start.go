package process

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/execplane/execplane/internal/protocol"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// defaultPath is used when neither the helper nor the request sets PATH.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// launch is what start needs to start the command.
type launch struct {
	program   string
	argv, env []string
	dir       string
	stdin     []byte
	// stdout and stderr receive the output.
	stdout, stderr Output
}

// Output receives one stream of a command's output as it comes and renders what it kept.
type Output interface {
	io.Writer
	Captured() *executionv1.CapturedOutput
}

// pipes are the command's three standard streams, both ends of each.
type pipes struct {
	stdinR, stdinW *os.File
	outR, outW     *os.File
	errR, errW     *os.File
}

func openPipes() (pipes, error) {
	var p pipes
	var err error
	if p.stdinR, p.stdinW, err = os.Pipe(); err != nil {
		return pipes{}, err
	}
	if p.outR, p.outW, err = os.Pipe(); err != nil {
		p.close()
		return pipes{}, err
	}
	if p.errR, p.errW, err = os.Pipe(); err != nil {
		p.close()
		return pipes{}, err
	}
	return p, nil
}

// close closes every end opened so far (after a failed openPipes: EMFILE must not leak).
func (p pipes) close() {
	for _, f := range []*os.File{p.stdinR, p.stdinW, p.outR, p.outW, p.errR, p.errW} {
		if f != nil {
			f.Close()
		}
	}
}

// command is a started command: its process, the reaper collecting its tree, and the
// copies of its output into the captures (one, from the terminal, for a terminal's).
type command struct {
	proc           *os.Process
	pid            int
	outR, errR     *os.File // errR is nil for a terminal
	stdout, stderr Output
	// copied receives once per output stream when its copy has ended.
	copied chan struct{}
	// exited receives the command's own wait status from the reaper.
	exited chan unix.WaitStatus
	// allReaped is closed when the reaper finds no child left.
	allReaped chan struct{}
}

// start starts the command in its own process group and sets stdin and reaping going. Every pipe end is closed or handed to the command, whether or not it started.
func start(l launch, p pipes) (*command, error) {
	restore := preferAsOOMVictim()
	proc, err := os.StartProcess(l.program, l.argv, &os.ProcAttr{
		Dir:   l.dir,
		Env:   l.env,
		Files: []*os.File{p.stdinR, p.outW, p.errW},
		Sys:   &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
	})
	restore()
	if err == nil {
		preferChildAsOOMVictim(proc.Pid)
	}
	// The child holds its ends; ours must close so EOF arrives when the last writer is gone.
	p.stdinR.Close()
	p.outW.Close()
	p.errW.Close()
	if err != nil {
		p.stdinW.Close()
		p.outR.Close()
		p.errR.Close()
		return nil, err
	}
	c := &command{
		proc: proc, pid: proc.Pid,
		outR: p.outR, errR: p.errR,
		stdout: l.stdout, stderr: l.stderr,
		copied:    make(chan struct{}, 2),
		exited:    make(chan unix.WaitStatus, 1),
		allReaped: make(chan struct{}),
	}
	go func() {
		_, _ = p.stdinW.Write(l.stdin) // EPIPE when the command ignores stdin: fine
		p.stdinW.Close()
	}()
	go c.reapChildren()
	return c, nil
}

// follow starts copying the output, once the start was reported (Options.Started): what
// the command writes first waits in its pipes or terminal meanwhile.
func (c *command) follow() {
	go c.copyOutput(c.stdout, c.outR)
	if c.errR != nil {
		go c.copyOutput(c.stderr, c.errR)
	}
}

// oomScoreAdjPath is this process's OOM killer adjustment (-1000..1000).
const oomScoreAdjPath = "/proc/self/oom_score_adj"

// oomVictim is the adjustment commands start with: the OOM killer's first choice.
const oomVictim = "1000"

// oomScoreAdj is this process's adjustment file, opened by OpenOOMScoreAdj.
var oomScoreAdj *os.File

// OpenOOMScoreAdj opens this process's OOM adjustment for the commands it will start (see
// preferAsOOMVictim). The helper calls it before it makes itself non-dumpable, which turns
// its /proc files over to root: opened before, the file stays writable through this
// descriptor (close-on-exec, so no command inherits it). Best effort: an error leaves
// commands with the helper's adjustment.
func OpenOOMScoreAdj() error {
	f, err := os.OpenFile(oomScoreAdjPath, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	oomScoreAdj = f
	return nil
}

// preferAsOOMVictim makes the command, and everything it forks, the OOM killer's first
// choice in the container's memory cgroup, before the helper: a memory or fork bomb past
// the limit then loses its own processes and is reported OUT_OF_MEMORY, instead of the
// helper dying mid-call (an outcome nobody can report). An unprivileged process may raise
// its adjustment and lower it again down to the value it was given, so the helper raises
// its own for the instant of the fork (the child inherits it) and restores it; the
// returned function restores. Where the file was not opened or cannot be written, nothing
// changes. (Against a helper the runtime gave an adjustment close to the maximum already —
// a Burstable Pod's is 1000 minus its share of the node's memory — this gains little, and
// a bomb of many small processes can still make the helper, the largest one, the victim:
// the gateway then reports an unknown outcome.)
func preferAsOOMVictim() (restore func()) {
	f := oomScoreAdj
	if f == nil {
		return func() {}
	}
	buf := make([]byte, 16)
	n, err := f.ReadAt(buf, 0)
	if n == 0 || (err != nil && !errors.Is(err, io.EOF)) {
		return func() {}
	}
	was := []byte(strings.TrimSpace(string(buf[:n])))
	if string(was) == oomVictim {
		return func() {}
	}
	if _, err := f.WriteAt([]byte(oomVictim), 0); err != nil {
		return func() {}
	}
	return func() { _, _ = f.WriteAt(was, 0) }
}

// preferChildAsOOMVictim is preferAsOOMVictim for a helper that could not open its own
// adjustment — one started from an execute-only binary is not dumpable from its exec, and
// its /proc files belong to root — : it raises the started command's own, which the command
// may write once it has exec'd a binary it can read. Best effort, and a little late: what the
// command forked before the write keeps the adjustment it was born with.
func preferChildAsOOMVictim(pid int) {
	if oomScoreAdj != nil {
		return // the command inherited the raised adjustment at its fork
	}
	f, err := os.OpenFile("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", os.O_WRONLY, 0)
	if err != nil {
		return
	}
	_, _ = f.Write([]byte(oomVictim))
	f.Close()
}

// copyOutput consumes one stream until EOF (no writer left) or its read deadline (see drain).
func (c *command) copyOutput(dst io.Writer, src *os.File) {
	_, _ = io.Copy(dst, src)
	src.Close()
	c.copied <- struct{}{}
}

// mergeEnv overlays the request's variables on the base environment.
func mergeEnv(base []string, vars []*executionv1.EnvironmentVariable) []string {
	idx := map[string]int{}
	env := make([]string, 0, len(base)+len(vars))
	for _, kv := range base {
		name, _, _ := strings.Cut(kv, "=")
		if _, dup := idx[name]; dup || !protocol.EnvAllowed(name) {
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
