package integration_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
)

// The stack `make demo` starts: `execctl dev up` with the controller and gateway binaries
// brings up a cluster of its own and execplane on it in the background, `execctl dev demo`
// walks a real client through the session, `execctl dev down` leaves nothing running, and a
// new stack in the same directory starts afresh.
func TestDemoStack(t *testing.T) {
	clustertest.Cluster(t) // skipped under -short, like every test that starts a cluster
	state := filepath.Join(t.TempDir(), "dev")
	execctl := func(timeout time.Duration, args ...string) string {
		t.Helper()
		cmd := exec.Command(execctlBin, args...)
		cmd.Dir = "../.."
		done := make(chan struct{})
		defer close(done)
		go func() {
			select {
			case <-done:
			case <-time.After(timeout):
				_ = cmd.Process.Kill()
			}
		}()
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("execctl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	helper := clustertest.LocalHelper
	defer func() {
		if t.Failed() {
			log, _ := os.ReadFile(filepath.Join(state, "devstack.log"))
			t.Logf("--- devstack log ---\n%s", log)
		}
		_ = exec.Command(execctlBin, "dev", "down", "--state-dir", state).Run()
	}()
	up := execctl(3*time.Minute, "dev", "up", "--state-dir", state, "--helper", helper, "--controller", controllerBin, "--gateway", gatewayBin)
	if !strings.Contains(up, "source "+filepath.Join(state, "caller.env")) {
		t.Fatalf("up did not say how to reach the stack:\n%s", up)
	}
	pid, err := os.ReadFile(filepath.Join(state, "devstack.pid"))
	if err != nil {
		t.Fatal(err)
	}
	if again := execctl(time.Minute, "dev", "up", "--state-dir", state, "--helper", helper, "--controller", controllerBin, "--gateway", gatewayBin); !strings.Contains(again, "already running") {
		t.Fatalf("a second up:\n%s", again)
	}
	demo := execctl(3*time.Minute, "dev", "demo", "--state-dir", state)
	for _, want := range []string{"10/10 delete the retired environment", `"HELLO FROM AN EXECPLANE WORKSPACE\n"`, "done in"} {
		if !strings.Contains(demo, want) {
			t.Fatalf("the walkthrough lacks %q:\n%s", want, demo)
		}
	}
	if down := execctl(time.Minute, "dev", "down", "--state-dir", state); !strings.Contains(down, "stopped") {
		t.Fatalf("down:\n%s", down)
	}
	// A second stack in the same directory starts afresh (new material, no stale state).
	execctl(3*time.Minute, "dev", "up", "--state-dir", state, "--helper", helper, "--controller", controllerBin, "--gateway", gatewayBin)
	if again := execctl(3*time.Minute, "dev", "demo", "--state-dir", state); !strings.Contains(again, "done in") {
		t.Fatalf("the walkthrough on a second stack:\n%s", again)
	}
	execctl(time.Minute, "dev", "down", "--state-dir", state)
	n, err := strconv.Atoi(strings.TrimSpace(string(pid)))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(n, 0); err == nil {
		t.Fatalf("the stack's daemon (pid %d) still runs after down", n)
	}
}
