package devstack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/execplane/execplane/internal/dev/devcluster"
)

// up starts `serve` as a detached process and waits until its stack is ready.
func up(ctx context.Context, o Options, serveArgs []string, stdout, stderr io.Writer) error {
	if pid, alive := daemonPID(o.StateDir); alive {
		fmt.Fprintf(stdout, "already running (pid %d)\n", pid)
		return describe(o.StateDir, stdout)
	}
	if err := os.MkdirAll(o.StateDir, 0o700); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	logPath := filepath.Join(o.StateDir, logFile)
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer log.Close()
	// The absolute state directory last: daemonPID recognises the daemon by it.
	cmd := exec.Command(self, append(serveArgs, "--state-dir", o.StateDir, "serve")...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	_ = os.Remove(filepath.Join(o.StateDir, readyFile))
	if err := cmd.Start(); err != nil {
		return err
	}
	pid := cmd.Process.Pid
	if err := os.WriteFile(filepath.Join(o.StateDir, pidFile), []byte(strconv.Itoa(pid)+"\n"), 0o600); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	what := "the local cluster"
	if o.system() {
		what += " and execplane"
	}
	fmt.Fprintf(stderr, "starting %s (log: %s)\n", what, logPath)
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	progress := newProgress(logPath, stderr)
	for {
		select {
		case err := <-exited:
			tail, _ := os.ReadFile(logPath)
			return fmt.Errorf("the stack exited during start-up (%v):\n%s", err, lastLines(string(tail), 20))
		case <-ctx.Done():
			_ = syscall.Kill(pid, syscall.SIGTERM)
			return fmt.Errorf("the stack did not become ready: %w (log: %s)", ctx.Err(), logPath)
		case <-tick.C:
			progress.show()
			if _, err := os.Stat(filepath.Join(o.StateDir, readyFile)); err == nil {
				progress.show()
				fmt.Fprintf(stdout, "ready (pid %d)\n", pid)
				return describe(o.StateDir, stdout)
			}
		}
	}
}

// progress relays the daemon's log lines to the terminal while up waits.
type progress struct {
	path string
	seen int
	w    io.Writer
}

func newProgress(path string, w io.Writer) *progress { return &progress{path: path, w: w} }

func (p *progress) show() {
	data, err := os.ReadFile(p.path)
	if err != nil || len(data) <= p.seen {
		return
	}
	chunk := data[p.seen:]
	if i := strings.LastIndexByte(string(chunk), '\n'); i >= 0 {
		chunk = chunk[:i+1]
		p.seen += i + 1
		for line := range strings.SplitSeq(strings.TrimRight(string(chunk), "\n"), "\n") {
			fmt.Fprintln(p.w, "  "+line)
		}
	}
}

// describe prints how to reach a ready stack.
func describe(dir string, w io.Writer) error {
	info, err := LoadInfo(dir)
	if err != nil {
		return err
	}
	kubectl := "kubectl is in " + info.KubectlDir
	if _, err := os.Stat(filepath.Join(info.KubectlDir, "kubectl")); err != nil {
		kubectl = "make kubectl builds kubectl into " + info.KubectlDir
	}
	fmt.Fprintf(w, "export KUBECONFIG=%s   # %s\n", info.Kubeconfig, kubectl)
	if info.GatewayAddress != "" {
		fmt.Fprintf(w, "gateway %s, namespace %s, executors in %s, profile %q\n", info.GatewayAddress, info.Namespace, info.ExecutorNamespace, info.Profile)
		fmt.Fprintf(w, "as the caller:        source %s\n", filepath.Join(dir, "caller.env"))
		fmt.Fprintf(w, "as the administrator: source %s\n", filepath.Join(dir, "admin.env"))
	}
	if info.E2BURL != "" {
		fmt.Fprintf(w, "E2B SDK programs:     source %s   (E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY; docs/e2b.md)\n", filepath.Join(dir, e2bEnvFile))
	}
	return nil
}

func status(dir string, stdout io.Writer) error {
	pid, alive := daemonPID(dir)
	if !alive {
		return fmt.Errorf("nothing running in %s", dir)
	}
	if _, err := os.Stat(filepath.Join(dir, readyFile)); err != nil {
		fmt.Fprintf(stdout, "starting (pid %d)\n", pid)
		return nil
	}
	fmt.Fprintf(stdout, "running (pid %d)\n", pid)
	return describe(dir, stdout)
}

// down stops the daemon started by up and waits until it has exited.
func down(dir string, stdout io.Writer) error {
	pid, alive := daemonPID(dir)
	clean := func() {
		for _, f := range []string{pidFile, readyFile, InfoFile} {
			_ = os.Remove(filepath.Join(dir, f))
		}
	}
	if !alive {
		fmt.Fprintln(stdout, "nothing running")
		clean()
		return nil
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(stopTimeout)
	for time.Now().Before(deadline) {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			clean()
			if owner, ok := devcluster.RealNodeLedgerPID(); ok && owner == pid {
				return fmt.Errorf("stopped, but the real node's changes to this machine were not all undone (%s says why; the next real node's start undoes them)", filepath.Join(dir, logFile))
			}
			fmt.Fprintln(stdout, "stopped")
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	clean()
	return fmt.Errorf("the stack (pid %d) did not stop within %s; killed its process group", pid, stopTimeout)
}

// daemonPID returns the recorded daemon PID and whether that process is alive.
func daemonPID(dir string) (int, bool) {
	data, err := os.ReadFile(filepath.Join(dir, pidFile))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 || syscall.Kill(pid, 0) != nil {
		return 0, false
	}
	// The PID may have been reused since a crash: only our own daemon counts (its command
	// line ends in "serve" with this state directory), so down never signals a stranger.
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return 0, false
	}
	args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	if len(args) == 0 || args[len(args)-1] != "serve" || !slices.Contains(args, dir) {
		return 0, false
	}
	return pid, true
}

// withoutCommand drops the positional command from args, keeping the flags.
func withoutCommand(args []string) []string {
	out := make([]string, 0, len(args))
	for _, a := range args {
		switch a {
		case "up", "down", "serve", "status":
			continue
		}
		out = append(out, a)
	}
	return out
}

// shq quotes s for a POSIX shell.
func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
