package process

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// One walk of KillTrees kills a whole chain, however quickly each killed link dies. A link
// killed before its children were read would hand them to a subreaper (or init) on its way
// out, and they would live on: the session helper's sweep of what a killed command left
// behind is a single walk.
func TestKillTreesKillsAChainInOneWalk(t *testing.T) {
	const depth = 40
	dir := t.TempDir()
	script := filepath.Join(dir, "chain.sh")
	// The chain ends in a long sleep: no link ends by itself within the test.
	body := "echo $$ >> pids\nn=$1\nif [ \"$n\" -le 0 ]; then exec sleep 300; fi\nsh \"$0\" $((n-1)) &\nwait\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", script, strconv.Itoa(depth))
	cmd.Dir = dir
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pids []int
	t.Cleanup(func() {
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	if !poll(10*time.Second, func() bool { pids = witnessed(t, filepath.Join(dir, "pids")); return len(pids) > depth }) {
		t.Fatalf("the chain did not build: %d of %d links", len(pids), depth+1)
	}

	KillTrees(cmd.Process.Pid)
	_ = cmd.Wait()

	// SIGKILL is sent to every link before KillTrees returns; the kernel may take a moment
	// to tear them down. A link never sent it sleeps on.
	var alive []int
	if !poll(2*time.Second, func() bool { alive = livePIDs(pids); return len(alive) == 0 }) {
		t.Fatalf("%d of %d links survived one walk: %v", len(alive), len(pids), alive)
	}
}

// poll reports whether cond held within bound, asking every 10 ms.
func poll(bound time.Duration, cond func() bool) bool {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(bound)
	for !cond() {
		select {
		case <-deadline:
			return cond()
		case <-tick.C:
		}
	}
	return true
}

func witnessed(t *testing.T, name string) []int {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []int
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// livePIDs returns those of pids that are alive and no zombie.
func livePIDs(pids []int) []int {
	var out []int
	for _, pid := range pids {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err == nil && !strings.Contains(string(stat), ") Z ") {
			out = append(out, pid)
		}
	}
	return out
}
