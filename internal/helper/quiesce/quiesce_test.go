package quiesce

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

// tree starts script under sh in a process group of its own and returns a Procs listing
// the processes descending from it (what /proc shows of a container, in miniature).
func tree(t *testing.T, script string) (root int, list Procs) {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	root = cmd.Process.Pid
	t.Cleanup(func() {
		_ = syscall.Kill(-root, syscall.SIGKILL)
		_ = syscall.Kill(-root, syscall.SIGCONT)
		_ = cmd.Wait()
	})
	return root, func() ([]int, error) {
		all, err := ProcDir()
		if err != nil {
			return nil, err
		}
		var out []int
		for _, pid := range all {
			for p, hops := pid, 0; p > 1 && hops < 64; hops++ {
				if p == root {
					out = append(out, pid)
					break
				}
				p = parent(p)
			}
		}
		return out, nil
	}
}

func parent(pid int) int {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// progress reads the counter a writer script keeps in file.
func progress(t *testing.T, file string) string {
	t.Helper()
	b, _ := os.ReadFile(file)
	return string(b)
}

// A writer and a forking loop are stopped — the counter does not move while they are — and
// continued after; none of them is left stopped.
func TestStopAndContinue(t *testing.T) {
	file := filepath.Join(t.TempDir(), "counter")
	_, list := tree(t, `i=0; while :; do i=$((i+1)); echo $i > `+file+`.new && mv `+file+`.new `+file+`; sleep 0.01 & wait; done`)
	waitFor(t, "the writer running", func() bool { return progress(t, file) != "" })
	procs, err := Stop(list)
	if err != nil {
		t.Fatal(err)
	}
	if len(procs) == 0 {
		t.Fatal("nothing stopped")
	}
	for _, p := range procs {
		if state, _, ok := stat(p.PID); ok && state != 'T' && state != 'Z' {
			t.Errorf("process %d is %c, not stopped", p.PID, state)
		}
	}
	before := progress(t, file)
	// A clock outside the stopped tree, writing at the writer's pace: once it has moved 20
	// times, the writer would have too, had it not been stopped.
	clock := filepath.Join(t.TempDir(), "clock")
	tree(t, `i=0; while :; do i=$((i+1)); echo $i > `+clock+`.new && mv `+clock+`.new `+clock+`; sleep 0.01 & wait; done`)
	waitFor(t, "the clock running", func() bool { return progress(t, clock) != "" })
	start, _ := strconv.Atoi(strings.TrimSpace(progress(t, clock)))
	waitFor(t, "the clock 20 ticks on", func() bool {
		n, _ := strconv.Atoi(strings.TrimSpace(progress(t, clock)))
		return n >= start+20
	})
	if after := progress(t, file); after != before {
		t.Fatalf("the counter moved while stopped: %s → %s", before, after)
	}
	if n := Continue(procs); n == 0 {
		t.Fatal("nothing continued")
	}
	waitFor(t, "the counter moving again", func() bool { return progress(t, file) != before })
}

// A process named with another start time (its pid reused) is not continued.
func TestContinueSkipsAReusedPid(t *testing.T) {
	root, list := tree(t, "sleep 60")
	procs, err := Stop(list)
	if err != nil || len(procs) == 0 {
		t.Fatalf("stop: %v %v", procs, err)
	}
	if n := Continue([]Proc{{PID: root, StartTicks: procs[0].StartTicks + 1}}); n != 0 {
		t.Fatalf("continued %d processes named with the wrong start time", n)
	}
	if state, _, _ := stat(root); state != 'T' {
		t.Fatalf("the process is %c", state)
	}
	Continue(procs)
}

// A hold is in force until its deadline; one past it continues what it stopped and is
// removed; a marker the helper could not have written (garbage, a deadline beyond MaxHold)
// is removed and holds nothing.
func TestHeld(t *testing.T) {
	MarkerPath = filepath.Join(t.TempDir(), "marker")
	now := time.Now()
	if Held(now) {
		t.Fatal("held without a marker")
	}
	root, list := tree(t, "sleep 60")
	procs, err := Stop(list)
	if err != nil {
		t.Fatal(err)
	}
	if err := Mark(Marker{Deadline: now.Add(time.Minute), Procs: procs}); err != nil {
		t.Fatal(err)
	}
	if !Held(now) {
		t.Fatal("not held before the deadline")
	}
	if state, _, _ := stat(root); state != 'T' {
		t.Fatalf("continued while held: %c", state)
	}
	if Held(now.Add(2 * time.Minute)) {
		t.Fatal("held past the deadline")
	}
	waitFor(t, "the stopped process continued", func() bool { state, _, _ := stat(root); return state != 'T' })
	if _, err := os.Stat(MarkerPath); !os.IsNotExist(err) {
		t.Fatalf("the expired marker is still there: %v", err)
	}
	for name, data := range map[string]string{
		"garbage":      "{not json",
		"far deadline": `{"deadline":"` + now.Add(MaxHold+time.Hour).Format(time.RFC3339Nano) + `"}`,
	} {
		if err := os.WriteFile(MarkerPath, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		if Held(now) {
			t.Errorf("%s: held", name)
		}
		if _, err := os.Stat(MarkerPath); !os.IsNotExist(err) {
			t.Errorf("%s: the marker is still there", name)
		}
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}

// A process stopped before the quiesce (a user's ^Z) is left stopped: not recorded, never
// continued.
func TestStopLeavesAStoppedProcessStopped(t *testing.T) {
	_, list := tree(t, "sleep 60 & sleep 60 & wait")
	var pids []int
	waitFor(t, "two sleeps", func() bool { pids, _ = list(); return len(pids) == 3 })
	paused := pids[len(pids)-1]
	if err := syscall.Kill(paused, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the paused sleep stopped", func() bool { s, _, _ := stat(paused); return s == 'T' })
	procs, err := Stop(list)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		if p.PID == paused {
			t.Fatal("a process stopped before the quiesce was recorded as stopped by it")
		}
	}
	if len(procs) != 2 {
		t.Fatalf("stopped %v, want the shell and the other sleep", procs)
	}
	Continue(procs)
	if s, _, _ := stat(paused); s != 'T' {
		t.Fatalf("the paused process was continued: %c", s)
	}
}
