package podexec

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/internal/helper/process"
	"github.com/execplane/execplane/internal/session"
	v1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// clusterPool is a session pool over pods/exec into a KWOK executor Pod, with a view that
// always shows the Pod as the environment's.
func clusterPool(t *testing.T, helperPath string, cfg PoolConfig) (*Pool, Target, *Metrics) {
	t.Helper()
	ns, pod := executorPod(t)
	e, err := NewExec(ExecConfig{HelperPath: helperPath}, clustertest.Cluster(t).RESTConfig(), ns)
	if err != nil {
		t.Fatal(err)
	}
	env := readyEnv()
	env.Status.Pod = &v1alpha1.ObjectIdentity{Name: pod.Name, UID: pod.UID}
	env.ObjectMeta = metav1.ObjectMeta{Name: testEnv, UID: env.UID}
	cfg.Metrics = NewMetrics(prometheus.NewRegistry())
	p := NewPool(cfg, e, func(string) *v1alpha1.ExecutionEnvironment { return env })
	t.Cleanup(p.Drain)
	return p, TargetOf(env), cfg.Metrics
}

func bigLimits() *helperv1.Limits {
	return &helperv1.Limits{MaxFileBytes: 8 << 20, MaxCommandBytes: 64 << 10, MaxCommandMillis: 30_000}
}

func commandRequest(script string) *helperv1.Request {
	return &helperv1.Request{Limits: bigLimits(), Operation: &helperv1.Request_Command{Command: &executionv1.CommandSpec{
		Program: &executionv1.CommandSpec_Shell{Shell: script}}}}
}

// The real helper over one session through pods/exec: many operations, a 5 MiB transfer
// each way, commands, one exec upgrade.
func TestSessionOverPodsExec(t *testing.T) {
	p, target, m := clusterPool(t, realHelper, PoolConfig{})
	ctx := clustertest.Context(t, time.Minute)
	content := make([]byte, 5<<20)
	_, _ = rand.Read(content)
	write := fileRequest("", &executionv1.FileOperation{Operation: &executionv1.FileOperation_Write{Write: &executionv1.WriteFile{
		Path: []byte("big"), Content: content, Mode: executionv1.WriteMode_WRITE_MODE_OVERWRITE}}})
	write.Limits = bigLimits()
	if resp, err := p.Execute(ctx, target, write, 1<<20); err != nil || resp.GetFile().GetWrite() == nil {
		t.Fatalf("5 MiB write: %v %v", resp, err)
	}
	read := fileRequest("", &executionv1.FileOperation{Operation: &executionv1.FileOperation_Read{Read: &executionv1.ReadFile{Path: []byte("big")}}})
	read.Limits = bigLimits()
	resp, err := p.Execute(ctx, target, read, 9<<20)
	if err != nil || !bytes.Equal(resp.GetFile().GetRead().GetContent(), content) {
		t.Fatalf("5 MiB read: %d bytes, %v", len(resp.GetFile().GetRead().GetContent()), err)
	}
	for i := range 20 {
		resp, err := p.Execute(ctx, target, commandRequest("echo "+strconv.Itoa(i)+"; wc -c < big"), 1<<20)
		if err != nil || string(resp.GetCommand().GetStdout().GetHead()) != strconv.Itoa(i)+"\n5242880\n" {
			t.Fatalf("command %d: %v %v", i, resp, err)
		}
	}
	if opened, served := testutil.ToFloat64(m.opened), testutil.ToFloat64(m.requests); opened != 1 || served != 22 {
		t.Fatalf("%v sessions opened for %v requests", opened, served)
	}
	if avoided := testutil.ToFloat64(m.avoided); avoided != 21 {
		t.Fatalf("%v exec upgrades avoided, want 21", avoided)
	}
}

// A helper from before sessions refuses the flag: its Pod is driven one exec per operation.
func TestSessionFallsBackToOneExecPerOperation(t *testing.T) {
	p, target, m := clusterPool(t, clustertest.OldHelperPath, PoolConfig{})
	ctx := clustertest.Context(t, time.Minute)
	for i := range 3 {
		w := fileRequest("", &executionv1.FileOperation{Operation: &executionv1.FileOperation_Write{Write: &executionv1.WriteFile{
			Path: []byte("f"), Content: []byte(strconv.Itoa(i)), Mode: executionv1.WriteMode_WRITE_MODE_OVERWRITE}}})
		if resp, err := p.Execute(ctx, target, w, 1<<20); err != nil || resp.GetFile().GetWrite() == nil {
			t.Fatalf("write %d: %v %v", i, resp, err)
		}
	}
	if opened := testutil.ToFloat64(m.opened); opened != 0 || p.Open() != 0 || !p.perExec(target.Pod.UID) {
		t.Fatalf("sessions opened %v, open %d", opened, p.Open())
	}
}

// Hostile helpers in session mode: the call fails within its deadline with bounded memory,
// and the session is closed.
func TestSessionHostileHelpers(t *testing.T) {
	for name := range clustertest.HostileSessions {
		t.Run(name, func(t *testing.T) {
			p, target, m := clusterPool(t, hostileDir+name, PoolConfig{Session: session.Config{AbandonGrace: time.Second}})
			ctx := clustertest.Context(t, 2*time.Second)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			start := time.Now()
			read := fileRequest("", &executionv1.FileOperation{Operation: &executionv1.FileOperation_Read{Read: &executionv1.ReadFile{Path: []byte("a")}}})
			_, err := p.Execute(ctx, target, read, 1<<20)
			elapsed := time.Since(start)
			runtime.ReadMemStats(&after)
			switch {
			case name == "session-duplicate":
				// The first answer is a valid one; the second breaks the session.
				if err != nil {
					t.Fatalf("the first answer: %v", err)
				}
			case err == nil:
				t.Fatal("a hostile helper's answer was accepted")
			case !errors.Is(err, ErrProtocol) && !errors.Is(err, ErrOutcomeUnknown) && !errors.Is(err, context.DeadlineExceeded):
				t.Fatalf("error %v is neither a violation, an unknown outcome nor the deadline", err)
			}
			wantReason := session.ReasonViolation
			switch name {
			case "session-silent":
				wantReason = session.ReasonSilent
			case "session-mute":
				wantReason = session.ReasonStuck
			}
			if elapsed > 3*time.Second {
				t.Fatalf("took %s past a 2 s deadline", elapsed)
			}
			if grew := int64(after.TotalAlloc) - int64(before.TotalAlloc); grew > 64<<20 {
				t.Fatalf("allocated %d bytes", grew)
			}
			// Every session it opened closes (the mute one after its grace).
			clustertest.Eventually(t, 5*time.Second, "the hostile session closed", func() bool { return p.Open() == 0 })
			if closed := testutil.ToFloat64(m.closed.WithLabelValues(string(wantReason))); closed < 1 {
				closed, _ := testutil.CollectAndFormat(m.closed, expfmt.TypeTextPlain, "execplane_gateway_sessions_closed_total")
				t.Fatalf("no session closed as %q; closed:\n%s", wantReason, closed)
			}
			t.Logf("%s: %v after %s; sessions opened %v", name, err, elapsed.Round(time.Millisecond), testutil.ToFloat64(m.opened))
		})
	}
}

// sessionHelpers are this machine's session helper processes (a KWOK executor's helper is
// a process here), descendants of this test.
func sessionHelpers(t *testing.T) []int {
	t.Helper()
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
		if len(args) == 2 && args[1] == sessionFlag && descendsFromUs(pid) {
			out = append(out, pid)
		}
	}
	return out
}

func descendsFromUs(pid int) bool {
	for i := 0; i < 64 && pid > 1; i++ {
		stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
		if err != nil {
			return false
		}
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if pid, err = strconv.Atoi(fields[1]); err != nil {
			return false
		}
		if pid == os.Getpid() {
			return true
		}
	}
	return false
}

// The session's helper killed by SIGKILL mid-command: the call's outcome is unknown, and the
// next call opens a new session.
func TestSessionHelperKilledMidOperation(t *testing.T) {
	p, target, m := clusterPool(t, realHelper, PoolConfig{})
	ctx := clustertest.Context(t, time.Minute)
	if _, err := p.Execute(ctx, target, commandRequest("true"), 1<<20); err != nil {
		t.Fatal(err)
	}
	helpers := sessionHelpers(t)
	if len(helpers) != 1 {
		t.Fatalf("session helpers: %v", helpers)
	}
	done := make(chan error, 1)
	go func() {
		_, err := p.Execute(ctx, target, commandRequest("sleep 30"), 1<<20)
		done <- err
	}()
	clustertest.Eventually(t, 10*time.Second, "the command started", func() bool {
		return testutil.ToFloat64(m.requests) >= 1 && len(process.Children(helpers[0])) > 0
	})
	if err := syscall.Kill(helpers[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrOutcomeUnknown) {
			t.Fatalf("a command whose helper was killed: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the call did not end when its helper was killed")
	}
	if _, err := p.Execute(ctx, target, commandRequest("true"), 1<<20); err != nil {
		t.Fatalf("the next call: %v", err)
	}
	if opened := testutil.ToFloat64(m.opened); opened != 2 {
		t.Fatalf("sessions opened %v, want 2", opened)
	}
}
