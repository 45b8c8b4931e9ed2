// Command pause is the real node's Pod sandbox process (the pause image, devimage): it holds
// the Pod's namespaces open, reaps the orphans that PID 1 of a shared PID namespace inherits,
// and exits 0 on SIGTERM or SIGINT. Static (CGO_ENABLED=0); it reads and writes nothing.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range signals {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for { // reap every exited child; stop when none is left to wait for
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
