package devcluster

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/execplane/execplane/internal/cli"
)

// Files in a daemon's state directory.
const (
	daemonPIDFile = "devcluster.pid"
	daemonLogFile = "devcluster.log"
	readyFile     = "ready"
)

// Daemon timeouts.
const (
	// daemonStartTimeout covers a cold build of the binaries (~7 min on 2 cores) plus start.
	daemonStartTimeout = 20 * time.Minute
	// daemonStopTimeout covers the cluster's own stop (SIGTERM, then SIGKILL after stopGrace
	// per tier).
	daemonStopTimeout = 30 * time.Second
)

// RunCommand is the entry point of the devcluster command: `up` starts a cluster that keeps
// running in the background (for the demo and for trying things by hand), `down` stops it,
// `serve` runs one in the foreground until interrupted.
func RunCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("devcluster", flag.ContinueOnError)
	fs.SetOutput(stderr)
	stateDir := fs.String("state-dir", ".state/cluster", "directory for the cluster's state, logs and kubeconfig")
	nodes := fs.Int("nodes", 1, "number of fake nodes")
	helper := fs.String("helper", "", "local helper binary to serve as /execplane/helper inside executor images")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: devcluster [flags] up|down|serve|status")
		fs.PrintDefaults()
	}
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return cli.Usagef("want exactly one of up, down, serve, status")
	}
	dir, err := filepath.Abs(*stateDir)
	if err != nil {
		return err
	}
	opts := Options{StateDir: dir, Nodes: *nodes}
	if *helper != "" {
		if opts.ImageFiles, err = helperImageFiles(*helper); err != nil {
			return err
		}
	}
	switch fs.Arg(0) {
	case "serve":
		return serve(ctx, opts, stderr)
	case "up":
		return up(ctx, dir, args, stdout, stderr)
	case "down":
		return down(dir, stdout)
	case "status":
		pid, alive := daemonPID(dir)
		if !alive {
			return fmt.Errorf("no cluster running in %s", dir)
		}
		fmt.Fprintf(stdout, "cluster running (pid %d); export KUBECONFIG=%s\n", pid, filepath.Join(dir, "kubeconfig"))
		return nil
	default:
		return cli.Usagef("unknown command %q: want up, down, serve or status", fs.Arg(0))
	}
}

// HelperImagePath is where executor images carry the helper.
const HelperImagePath = "/execplane/helper"

func helperImageFiles(helper string) (map[string]string, error) {
	abs, err := filepath.Abs(helper)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(abs); err != nil {
		return nil, fmt.Errorf("--helper: %w", err)
	}
	return map[string]string{HelperImagePath: abs}, nil
}

// serve runs a cluster in the foreground until ctx ends.
func serve(ctx context.Context, opts Options, stderr io.Writer) error {
	opts.Logf = func(f string, a ...any) { fmt.Fprintf(stderr, f+"\n", a...) }
	_ = os.Remove(filepath.Join(opts.StateDir, readyFile))
	c, err := Start(ctx, opts)
	if err != nil {
		return err
	}
	defer c.Stop()
	if err := os.WriteFile(filepath.Join(opts.StateDir, readyFile), []byte(c.StartupTime.Round(time.Millisecond).String()+"\n"), 0o600); err != nil {
		return err
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			opts.Logf("devcluster: stopping")
			return nil
		case <-tick.C:
			if err := c.Healthy(); err != nil {
				return err
			}
		}
	}
}

// up starts `serve` as a detached process and waits until its cluster is ready.
func up(ctx context.Context, dir string, args []string, stdout, stderr io.Writer) error {
	if pid, alive := daemonPID(dir); alive {
		fmt.Fprintf(stdout, "cluster already running (pid %d)\nexport KUBECONFIG=%s\n", pid, filepath.Join(dir, "kubeconfig"))
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	logPath := filepath.Join(dir, daemonLogFile)
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer logFile.Close()
	serveArgs := append(withoutCommand(args), "serve")
	cmd := exec.Command(self, serveArgs...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	_ = os.Remove(filepath.Join(dir, readyFile))
	if err := cmd.Start(); err != nil {
		return err
	}
	pid := cmd.Process.Pid
	if err := os.WriteFile(filepath.Join(dir, daemonPIDFile), []byte(strconv.Itoa(pid)+"\n"), 0o600); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	fmt.Fprintf(stderr, "starting the local cluster (log: %s)...\n", logPath)
	ctx, cancel := context.WithTimeout(ctx, daemonStartTimeout)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-exited:
			tail, _ := os.ReadFile(logPath)
			return fmt.Errorf("the cluster exited during start-up (%v):\n%s", err, lastLines(string(tail), 20))
		case <-ctx.Done():
			_ = syscall.Kill(pid, syscall.SIGTERM)
			return fmt.Errorf("the cluster did not become ready: %w (log: %s)", ctx.Err(), logPath)
		case <-tick.C:
			if took, err := os.ReadFile(filepath.Join(dir, readyFile)); err == nil {
				fmt.Fprintf(stdout, "cluster ready in %s (pid %d)\nexport KUBECONFIG=%s\n", strings.TrimSpace(string(took)), pid, filepath.Join(dir, "kubeconfig"))
				return nil
			}
		}
	}
}

// down stops the daemon started by up and waits until it has exited.
func down(dir string, stdout io.Writer) error {
	pid, alive := daemonPID(dir)
	if !alive {
		fmt.Fprintln(stdout, "no cluster running")
		_ = os.Remove(filepath.Join(dir, daemonPIDFile))
		return nil
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(daemonStopTimeout)
	for time.Now().Before(deadline) {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			_ = os.Remove(filepath.Join(dir, daemonPIDFile))
			_ = os.Remove(filepath.Join(dir, readyFile))
			fmt.Fprintln(stdout, "cluster stopped")
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	return fmt.Errorf("the cluster (pid %d) did not stop within %s; killed its process group", pid, daemonStopTimeout)
}

// daemonPID returns the recorded daemon PID and whether that process is alive.
func daemonPID(dir string) (int, bool) {
	data, err := os.ReadFile(filepath.Join(dir, daemonPIDFile))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return 0, false
	}
	return pid, syscall.Kill(pid, 0) == nil
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

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
