package realnode_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/execplane/execplane/internal/executor"
	"github.com/execplane/execplane/pkg/client"
	"github.com/execplane/execplane/pkg/profile"
)

// quiesceReport is the helper's --quiesce report (helper.QuiesceReport).
type quiesceReport struct {
	Stopped, Continued int
	Until              time.Time
	Done               bool
	Error              string
}

// The helper's quiesce in a running executor on the real node: a detached command counting
// into a file is stopped — its counter does not move while the hold lasts — a command
// through the API is refused NOT_READY (retryable) and a file read goes on; the end of the
// quiescer's stdin continues everything, and the counter moves again.
func TestQuiesceStopsAndContinuesTheWorkspace(t *testing.T) {
	s := startSystem(t)
	w := s.ensure(t, "quiesce", profileExample)
	if _, err := w.run.Start(ctx(t), client.Command{Shell: `i=0; while :; do i=$((i+1)); echo $i > count.new && mv count.new count; sleep 0.01; done`, Timeout: 4 * time.Minute}, client.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	count := func() string {
		t.Helper()
		b, err := w.run.ReadFile(ctx(t), "count")
		if err != nil {
			t.Fatalf("read the counter: %v", err)
		}
		return string(b)
	}
	moving := func(what string) {
		t.Helper()
		first := ""
		for deadline := time.Now().Add(30 * time.Second); ; {
			c, err := w.run.ReadFile(ctx(t), "count")
			if err == nil && first == "" {
				first = string(c)
			} else if err == nil && string(c) != first {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the counter does not move", what)
			}
		}
	}
	moving("before the quiesce")

	held, release := s.quiesce(t, w, "1m")
	t.Logf("held: %+v", held)
	// One quiesce at a time: a second would stop the first, and either's end would continue
	// what the other still holds.
	if second, _ := s.startQuiesce(t, w, "1m"); !strings.Contains(second.Error, "another quiesce") {
		t.Fatalf("a second quiesce during the hold: %+v", second)
	}
	before := count()
	_, err := w.run.Run(ctx(t), client.Command{Shell: "echo during", Timeout: time.Minute})
	// The helper's UNAVAILABLE reaches the caller as every executor-side "not now" does:
	// FAILED_PRECONDITION with reason NOT_READY, retryable (podexec/answers.go).
	if !errors.Is(err, client.ErrNotReady) || !strings.Contains(err.Error(), "snapshotted") {
		t.Fatalf("a command during the hold: %v", err)
	}
	if after := count(); after != before {
		t.Fatalf("the counter moved during the hold: %s → %s", before, after)
	}
	if done := release(); done.Continued != held.Stopped {
		t.Fatalf("the end of the hold: %+v (stopped %d)", done, held.Stopped)
	}
	moving("after the quiesce")
	if r := w.must(t, "echo after"); r != "after\n" {
		t.Fatalf("a command after the hold: %q", r)
	}
}

// quiesce runs the helper's --quiesce for d in w's executor, as the gateway will: it
// returns the hold's first report once the processes are stopped, and a release that ends
// the hold (the release line on the quiescer's stdin) and returns its last report.
func (s *system) quiesce(t *testing.T, w *workspace, d string) (quiesceReport, func() quiesceReport) {
	t.Helper()
	held, release := s.startQuiesce(t, w, d)
	if held.Error != "" || held.Stopped == 0 || held.Until.IsZero() {
		t.Fatalf("the hold: %+v", held)
	}
	return held, release
}

// startQuiesce runs the helper's --quiesce and returns its first report as it is (a
// refusal included) and the release.
func (s *system) startQuiesce(t *testing.T, w *workspace, d string) (quiesceReport, func() quiesceReport) {
	t.Helper()
	pod := s.pod(t, w)
	req := s.cluster.Kube().CoreV1().RESTClient().Post().Resource("pods").Namespace(pod.Namespace).Name(pod.Name).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: executor.ContainerName, Command: []string{profile.DefaultHelperPath, "--quiesce", d},
			Stdin: true, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ex, err := remotecommand.NewWebSocketExecutor(s.cluster.RESTConfig(), "GET", req.URL().String())
	if err != nil {
		t.Fatal(err)
	}
	stdinR, stdinW := io.Pipe()
	stdoutR, stdoutW := io.Pipe()
	var stderr lockedText
	streamed := make(chan error, 1)
	go func() {
		streamed <- ex.StreamWithContext(ctx(t), remotecommand.StreamOptions{Stdin: stdinR, Stdout: stdoutW, Stderr: &stderr})
		stdoutW.Close()
	}()
	lines := bufio.NewScanner(stdoutR)
	next := func() quiesceReport {
		t.Helper()
		if !lines.Scan() {
			t.Fatalf("the quiescer ended: %v, stderr %q", lines.Err(), stderr.String())
		}
		var r quiesceReport
		if err := json.Unmarshal(lines.Bytes(), &r); err != nil {
			t.Fatalf("report %q: %v", lines.Text(), err)
		}
		return r
	}
	held := next()
	if held.Error != "" {
		stdinW.Close()
		<-streamed
		t.Logf("the quiescer refused: %s (stderr %q)", held.Error, stderr.String())
		return held, nil
	}
	released := false
	release := func() quiesceReport {
		t.Helper()
		released = true
		if _, err := stdinW.Write([]byte("release\n")); err != nil {
			t.Fatalf("release: %v", err)
		}
		stdinW.Close()
		done := next()
		if !done.Done {
			t.Fatalf("the end of the hold: %+v", done)
		}
		if err := <-streamed; err != nil {
			t.Fatalf("the quiescer's exec: %v", err)
		}
		return done
	}
	t.Cleanup(func() {
		if !released {
			stdinW.Close()
		}
	})
	return held, release
}

// lockedText is a strings.Builder written by the exec stream's goroutine and read by the
// test's.
type lockedText struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedText) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedText) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
