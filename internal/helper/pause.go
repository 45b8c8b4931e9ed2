package helper

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// Pause is the executor container's main process: it holds the container open without
// listening on anything or holding any credential, reaps orphans (as PID 1 it inherits
// them), and returns when ctx ends (SIGTERM on Pod deletion), so the Pod's termination is
// prompt and clean.
func Pause(ctx context.Context) error {
	if os.Getpid() != 1 {
		// Not PID 1 (a runtime with an init process): reap our orphans all the same.
		_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	}
	children := make(chan os.Signal, 1)
	signal.Notify(children, syscall.SIGCHLD)
	defer signal.Stop(children)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-children:
			reapZombies()
		}
	}
}

func reapZombies() {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
	}
}
