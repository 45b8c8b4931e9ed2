package process

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
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
	// maxOutputBytes caps each captured stream.
	maxOutputBytes int
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
// copies of its output into the captures.
type command struct {
	proc           *os.Process
	pid            int
	outR, errR     *os.File
	stdout, stderr *capture
	// copied receives once per output stream when its copy has ended.
	copied chan struct{}
	// exited receives the command's own wait status from the reaper.
	exited chan unix.WaitStatus
	// allReaped is closed when the reaper finds no child left.
	allReaped chan struct{}
}

// start starts the command in its own process group and sets stdin, output and reaping
// going. Every pipe end is closed or handed to the command, whether or not it started.
func start(l launch, p pipes) (*command, error) {
	proc, err := os.StartProcess(l.program, l.argv, &os.ProcAttr{
		Dir:   l.dir,
		Env:   l.env,
		Files: []*os.File{p.stdinR, p.outW, p.errW},
		Sys:   &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
	})
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
		stdout: newCapture(l.maxOutputBytes), stderr: newCapture(l.maxOutputBytes),
		copied:    make(chan struct{}, 2),
		exited:    make(chan unix.WaitStatus, 1),
		allReaped: make(chan struct{}),
	}
	go func() {
		_, _ = p.stdinW.Write(l.stdin) // EPIPE when the command ignores stdin: fine
		p.stdinW.Close()
	}()
	go c.copyOutput(c.stdout, c.outR)
	go c.copyOutput(c.stderr, c.errR)
	go c.reapChildren()
	return c, nil
}

// copyOutput consumes one stream until EOF (no writer left) or its read deadline (see drain).
func (c *command) copyOutput(dst *capture, src *os.File) {
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
