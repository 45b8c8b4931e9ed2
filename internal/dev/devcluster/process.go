package devcluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// stopGrace is how long a process may take to exit on SIGTERM before it is killed. The
// apiserver needs about 3 s to drain; state is throw-away, so waiting longer buys nothing.
const stopGrace = 5 * time.Second

// logTailBytes is how much of a failed process's log an error quotes.
const logTailBytes = 2048

// process is one child of the cluster, in its own process group.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	waitErr error
}

// processes is the set of children Start launched, in start order.
type processes struct {
	mu    sync.Mutex
	procs []*process
}

// start launches bin with args, logging to dir/name.log. The child gets its own process
// group (so its descendants are stopped with it) and SIGKILL when this process dies.
func (ps *processes) start(dir, name, bin string, args ...string) (*process, error) {
	return ps.startWithPath(dir, name, os.Getenv("PATH"), bin, args...)
}

// startWithPath is start with the child's PATH given.
func (ps *processes) startWithPath(dir, name, path, bin string, args ...string) (*process, error) {
	logPath := filepath.Join(dir, name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.Dir = dir
	// A minimal environment: nothing from the test's environment leaks into the cluster, and
	// HOME points into the state directory (kwok would read ~/.kwok otherwise).
	cmd.Env = []string{"PATH=" + path, "HOME=" + dir}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	ps.mu.Lock()
	ps.procs = append(ps.procs, p)
	ps.mu.Unlock()
	if err := os.WriteFile(filepath.Join(dir, name+".pid"), []byte(fmt.Sprintf("%d\n", cmd.Process.Pid)), 0o600); err != nil {
		return nil, err
	}
	return p, nil
}

// exited reports an error when the process has already exited.
func (p *process) exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s exited: %v\n%s", p.name, p.waitErr, p.logTail())
	default:
		return nil
	}
}

func (p *process) logTail() string {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return ""
	}
	if len(data) > logTailBytes {
		data = data[len(data)-logTailBytes:]
	}
	return "--- " + p.logPath + " (tail) ---\n" + string(bytes.TrimSpace(data))
}

// stopAll stops every child and returns when each has been reaped. Clients go first, all at
// once, with SIGTERM; etcd (the first process) last, so that the apiserver's shutdown is not
// stuck on a vanished store and etcd is not held open by clients. Whatever has not exited
// after stopGrace is killed: state is throw-away, so a kill loses nothing. It returns the
// names of the processes that had to be killed.
func (ps *processes) stopAll() []string {
	ps.mu.Lock()
	procs := append([]*process(nil), ps.procs...)
	ps.procs = nil
	ps.mu.Unlock()
	if len(procs) == 0 {
		return nil
	}
	var killed []string
	tiers := [][]*process{procs[1:], procs[:1]}
	for _, tier := range tiers {
		for _, p := range tier {
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
		}
		deadline := time.After(stopGrace)
		for _, p := range tier {
			select {
			case <-p.done:
			case <-deadline:
			}
			if p.exited() == nil {
				killed = append(killed, p.name)
			}
			// The group too: a descendant that outlived its parent must not survive.
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
			_ = os.Remove(filepath.Join(filepath.Dir(p.logPath), p.name+".pid"))
		}
	}
	return killed
}

// firstExited returns the error of the first child that has exited, if any.
func (ps *processes) firstExited() error {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	var errs []error
	for _, p := range ps.procs {
		if err := p.exited(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
