//go:build failpoint

package failpoint

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
)

// Enabled reports whether this binary was built with failpoints.
const Enabled = true

var (
	broken  = os.Getenv(BreakEnv)
	armed   string
	action  string
	stopped sync.Once
)

func init() {
	armed, action, _ = strings.Cut(os.Getenv(Env), "=")
	if action == "" {
		action = "kill"
	}
}

// Inject fires the armed failpoint when name matches it.
func Inject(name string) {
	if armed == "" || name != armed {
		return
	}
	fmt.Fprintf(os.Stderr, "failpoint %s: %s\n", name, action)
	switch action {
	case "stop":
		stopped.Do(func() {
			_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
			fmt.Fprintf(os.Stderr, "failpoint %s: resumed\n", name)
		})
	default:
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // SIGKILL cannot be caught; never continue past the point
	}
}

// Breaks reports whether this process was asked to break the named guarantee.
func Breaks(name string) bool { return broken != "" && name == broken }
