package helper

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/execplane/execplane/internal/helper/process"
	"github.com/execplane/execplane/internal/protocol"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// selfExe is this helper's own executable as the kernel holds it: a child started from it is
// the very binary the session runs, whatever happened to the file the session was started
// from.
const selfExe = "/proc/self/exe"

// childArgv0 names a session's per-command child in its argv (ps shows it; the flags do the
// work).
const childArgv0 = "execplane-helper-command"

// childHeartbeat is the heartbeat interval of a child: its heartbeats stop at the session,
// which has its own, so they only need to be rare.
const childHeartbeat = maxHeartbeat

// reapRetry is the pause before the reaper waits again when it found no child but one is
// registered (a start under way).
const reapRetry = time.Millisecond

// reapGrace bounds the wait for every process of a session to be reaped at its end.
const reapGrace = 2 * time.Second

// children are a session's per-command helpers. The session is their subreaper: a child
// killed before its command ended (the OOM killer, the workload) leaves that command's
// processes to the session, which kills them — a session's only legitimate children are its
// per-command helpers, so after each of them exits, every other child is swept.
type children struct {
	mu   sync.Mutex
	live map[int]chan unix.WaitStatus
	// detached are durable commands' supervisors started by the session: they outlive it
	// (docs/commands.md), so no sweep and no end of the session kills them; the reaper
	// collects one that ends while the session lives.
	detached map[int]bool
	reaping  bool
	empty    chan struct{} // closed when the reaper found no child left
}

func newChildren() *children {
	return &children{live: map[int]chan unix.WaitStatus{}, detached: map[int]bool{}}
}

// spawnDetached starts a durable command's supervisor (supervisor.Config.Spawn): under the
// lock, so that no sweep takes it for an orphan, and registered as detached.
func (c *children) spawnDetached(name string, argv []string, attr *os.ProcAttr) (*os.Process, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, err := os.StartProcess(name, argv, attr)
	if err != nil {
		return nil, err
	}
	c.detached[p.Pid] = true
	if !c.reaping {
		if err := process.EnableSubreaper(); err != nil {
			return p, nil // nothing to sweep then; the supervisor is ours all the same
		}
		c.reaping = true
		c.empty = make(chan struct{})
		go c.reap()
	}
	return p, nil
}

// ours lists the session's children that are not detached supervisors. The caller holds mu.
func (c *children) ours() []int {
	var out []int
	for _, pid := range process.Children(os.Getpid()) {
		if !c.detached[pid] {
			out = append(out, pid)
		}
	}
	return out
}

// run serves a command request through a child helper and returns its response; a child
// that died before answering is an OUTCOME_UNKNOWN refusal (the command may have run).
func (c *children) run(cfg Config, req *helperv1.Request, cancel <-chan struct{}) *helperv1.Response {
	id := req.GetRequestId()
	one := proto.Clone(req).(*helperv1.Request)
	one.Version = helperv1.ProtocolVersion_PROTOCOL_VERSION_1
	frame, err := protocol.Marshal(one)
	if err != nil {
		return failure(id, err)
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return failure(id, err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return failure(id, err)
	}
	pid, status, err := c.start(cfg, inR, outW)
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		if errors.Is(err, unix.EAGAIN) {
			// The container's process limit is reached (a fork bomb of an earlier command,
			// say): nothing ran, and the caller may retry once it is gone.
			return errorResponse(id, helperv1.ErrorCode_ERROR_CODE_RESOURCE_EXHAUSTED, "cannot start the command: the executor's process limit is reached")
		}
		return failure(id, fmt.Errorf("starting the command's helper: %w", err))
	}
	// stdin: the request, then held open until the response or a cancel (EOF cancels).
	answered := make(chan struct{})
	closeIn := sync.OnceFunc(func() { close(answered) })
	go func() {
		if err := protocol.WritePayload(inW, frame, protocol.MaxRequestBytes); err == nil {
			select {
			case <-answered:
			case <-cancel:
			}
		}
		inW.Close()
	}()
	kill := func() { _ = unix.Kill(pid, unix.SIGKILL) }
	res := protocol.ReadResponse(outR, protocol.MaxResponseBytes, closeIn, kill)
	closeIn()
	outR.Close()
	ws := <-status
	switch {
	case res.Err == nil && res.Resp != nil && res.Resp.GetRequestId() == id:
		return res.Resp
	case ws.Signaled():
		return errorResponse(id, helperv1.ErrorCode_ERROR_CODE_OUTCOME_UNKNOWN,
			fmt.Sprintf("the command's helper died by signal %d before it answered (the OOM killer, or the workload)", ws.Signal()))
	default:
		return errorResponse(id, helperv1.ErrorCode_ERROR_CODE_OUTCOME_UNKNOWN, "the command's helper ended without a valid answer")
	}
}

// start starts a child helper on the given stdin and stdout and returns its pid and where
// its wait status will arrive. Under the lock, so that no sweep takes it for an orphan.
func (c *children) start(cfg Config, stdin, stdout *os.File) (int, <-chan unix.WaitStatus, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, err := os.StartProcess(selfExe, []string{childArgv0, "--root", cfg.Root, "--heartbeat-interval", childHeartbeat.String()}, &os.ProcAttr{
		Env:   os.Environ(),
		Files: []*os.File{stdin, stdout, os.Stderr},
		// The session dying (SIGKILL, the OOM killer) takes its children with it.
		Sys: &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		return 0, nil, err
	}
	pid := p.Pid
	_ = p.Release() // the reaper collects it by pid
	status := make(chan unix.WaitStatus, 1)
	c.live[pid] = status
	if !c.reaping {
		if err := process.EnableSubreaper(); err != nil {
			return 0, nil, errors.Join(err, unix.Kill(pid, unix.SIGKILL))
		}
		c.reaping = true
		c.empty = make(chan struct{})
		go c.reap()
	}
	return pid, status, nil
}

// reap collects every child of the session — its per-command helpers and the orphans
// reparented to it — until none is left.
func (c *children) reap() {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		c.mu.Lock()
		if err != nil { // ECHILD: nothing left, unless a child was started meanwhile
			if len(c.live) == 0 && len(c.detached) == 0 {
				c.reaping = false
				close(c.empty)
				c.mu.Unlock()
				return
			}
			c.mu.Unlock()
			time.Sleep(reapRetry) // a child being started: its wait is about to exist
			continue
		}
		if status, ok := c.live[pid]; ok {
			delete(c.live, pid)
			status <- ws
			c.sweep()
		}
		delete(c.detached, pid)
		c.mu.Unlock()
	}
}

// sweep kills every child of the session that is not a live per-command helper, with all
// its descendants: what a killed child's command left behind. The caller holds mu.
func (c *children) sweep() {
	var orphans []int
	for _, pid := range c.ours() {
		if _, ok := c.live[pid]; !ok {
			orphans = append(orphans, pid)
		}
	}
	process.KillTrees(orphans...)
}

// killAll kills every process the session started but its durable commands' supervisors,
// and waits, within reapGrace, until all are reaped.
func (c *children) killAll() {
	c.mu.Lock()
	reaping := c.reaping
	if reaping { // else no child was started, or all are reaped: nothing is left
		process.KillTrees(c.ours()...)
	}
	c.mu.Unlock()
	if !reaping {
		return
	}
	deadline := time.After(reapGrace)
	poll := time.NewTicker(10 * time.Millisecond)
	defer poll.Stop()
	for {
		select {
		case <-deadline:
			return
		case <-poll.C:
			c.mu.Lock()
			left := c.ours()
			process.KillTrees(left...)
			c.mu.Unlock()
			if len(left) == 0 {
				return
			}
		}
	}
}
