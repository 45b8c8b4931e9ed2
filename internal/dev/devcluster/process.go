package devcluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"
)

// stopGrace is how long a process may take to exit on SIGTERM before it is killed. The
// apiserver needs about 3 s to drain; state is throw-away, so waiting longer buys nothing.
const stopGrace = 5 * time.Second

// logTailBytes is how much of a failed process's log an error quotes.
const logTailBytes = 2048

// A supervised child that exits on its own is started again after relaunchDelay, doubled for
// each exit within quickExit of its start up to relaunchDelayMax: a kubelet's restart of a
// static Pod, with its back-off.
const (
	relaunchDelay    = time.Second
	relaunchDelayMax = 16 * time.Second
	quickExit        = 10 * time.Second
)

// process is one child of the cluster, in its own process group.
type process struct {
	name    string
	dir     string
	path    string
	bin     string
	args    []string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	waitErr error
	// owner, when set, supervises the process: it is started again when it exits on its
	// own (not by stopAll or restart). started is when it was; quickExits counts the exits
	// in a row, before it, within quickExit of their start.
	owner      *processes
	started    time.Time
	quickExits int
	// Set once it has exited, before done is closed: quick, whether it exited within
	// quickExit of its start; restarting, whether it is about to be started again (cleared
	// if that fails).
	quick, restarting bool
}

// crashLoop is how many quick exits in a row make a supervised child's exit a failure to
// report (firstExited), not a restart to wait for.
const crashLoop = 3

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

// startSupervised is start for a child that is started again whenever it exits on its own,
// as the control plane's static Pods are by their kubelet: kube-scheduler exits when it finds
// its cache inconsistent after an API server restart, and a real cluster brings it back.
func (ps *processes) startSupervised(dir, name, bin string, args ...string) (*process, error) {
	p := &process{name: name, dir: dir, path: os.Getenv("PATH"), bin: bin, args: args, owner: ps}
	return ps.add(p)
}

// startWithPath is start with the child's PATH given.
func (ps *processes) startWithPath(dir, name, path, bin string, args ...string) (*process, error) {
	return ps.add(&process{name: name, dir: dir, path: path, bin: bin, args: args})
}

// add launches p and adds it to the set.
func (ps *processes) add(p *process) (*process, error) {
	if err := p.launch(os.O_TRUNC); err != nil {
		return nil, err
	}
	ps.mu.Lock()
	ps.procs = append(ps.procs, p)
	ps.mu.Unlock()
	return p, nil
}

// launch starts p's command, its log opened with flag (O_TRUNC or O_APPEND).
func (p *process) launch(flag int) error {
	p.logPath = filepath.Join(p.dir, p.name+".log")
	logFile, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|flag, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.Dir = p.dir
	// A minimal environment: nothing from the test's environment leaks into the cluster, and
	// HOME points into the state directory (kwok would read ~/.kwok otherwise).
	cmd.Env = []string{"PATH=" + p.path, "HOME=" + p.dir}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	p.cmd, p.done, p.started = cmd, make(chan struct{}), time.Now()
	done := p.done
	go func() {
		p.waitErr = cmd.Wait()
		logFile.Close()
		delay := relaunchDelay
		if p.owner != nil {
			p.quick = time.Since(p.started) < quickExit
			if p.quick {
				delay = min(relaunchDelay<<min(p.quickExits, 8), relaunchDelayMax)
			}
			p.restarting = !p.quick || p.quickExits+1 < crashLoop
		}
		close(done)
		if p.owner != nil {
			time.AfterFunc(delay, func() { p.owner.relaunch(p) })
		}
	}()
	return os.WriteFile(filepath.Join(p.dir, p.name+".pid"), []byte(fmt.Sprintf("%d\n", cmd.Process.Pid)), 0o600)
}

// relaunch starts a supervised child that exited on its own again, its log appended to —
// unless it is no longer in the set: stopAll took it, or restart replaced it.
func (ps *processes) relaunch(p *process) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	i := slices.Index(ps.procs, p)
	if i < 0 {
		return
	}
	next := &process{name: p.name, dir: p.dir, path: p.path, bin: p.bin, args: p.args, owner: p.owner}
	if p.quick {
		next.quickExits = p.quickExits + 1
	}
	if err := next.launch(os.O_APPEND); err != nil {
		p.restarting = false // it stays exited: firstExited reports it
		return
	}
	ps.procs[i] = next
}

// find returns the child named name.
func (ps *processes) find(name string) (*process, error) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, p := range ps.procs {
		if p.name == name {
			return p, nil
		}
	}
	return nil, fmt.Errorf("no process %q in this cluster", name)
}

// signal sends sig to the named child's process group.
func (ps *processes) signal(name string, sig syscall.Signal) error {
	p, err := ps.find(name)
	if err != nil {
		return err
	}
	return syscall.Kill(-p.cmd.Process.Pid, sig)
}

// restart kills the named child's group (SIGKILL: a crash) and starts it again with the
// same flags, its log appended to.
func (ps *processes) restart(name string) error {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for i, p := range ps.procs {
		if p.name != name {
			continue
		}
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGCONT) // a paused one dies too
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
		next := &process{name: p.name, dir: p.dir, path: p.path, bin: p.bin, args: p.args, owner: p.owner}
		if err := next.launch(os.O_APPEND); err != nil {
			return err
		}
		ps.procs[i] = next
		return nil
	}
	return fmt.Errorf("no process %q in this cluster", name)
}

// exited reports an error when the process has already exited — unless it is supervised and
// about to be started again (not crash-looping, its restart not failed).
func (p *process) exited() error {
	select {
	case <-p.done:
		if p.restarting {
			return nil
		}
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
