package realnode_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/internal/dev/devimage"
	"github.com/execplane/execplane/internal/executor"
	"github.com/execplane/execplane/pkg/client"
)

// hostProcesses returns the PIDs of this machine's processes whose command line contains
// marker: what runs on the node, whatever the containers report.
func hostProcesses(marker string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(cmdline, []byte(marker)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// longCommand starts, in the background, a command that runs marker sleeps — one in the
// command's process group, one escaped into a session of its own — and waits until both
// run on the node. The returned channel receives when the call returns.
func longCommand(t *testing.T, run *client.Run, marker int) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := run.Run(context.WithoutCancel(t.Context()), client.Command{
			Shell: fmt.Sprintf("setsid sleep %d & sleep %d", marker+1, marker), Timeout: 5 * time.Minute})
		done <- err
	}()
	clustertest.Eventually(t, 30*time.Second, "the command's processes on the node", func() bool {
		return len(hostProcesses(fmt.Sprintf("sleep\x00%d", marker))) == 1 && len(hostProcesses(fmt.Sprintf("sleep\x00%d", marker+1))) == 1
	})
	return done
}

// requireGone fails unless no process of marker runs on the node and containerd runs no
// task of the containers.
func (s *system) requireGone(t *testing.T, marker int, containers []string) {
	t.Helper()
	for _, m := range []int{marker, marker + 1} {
		if pids := hostProcesses(fmt.Sprintf("sleep\x00%d", m)); len(pids) > 0 {
			t.Errorf("sleep %d still runs on the node: pids %v", m, pids)
		}
	}
	tasks, err := s.cluster.RealNodeCtr(ctx(t), "tasks", "ls", "--quiet")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range containers {
		if strings.Contains(string(tasks), id) {
			t.Errorf("containerd still runs the old executor's container %s", id)
		}
	}
}

// containerIDs returns the runtime's IDs of the Pod's containers ("containerd://<id>").
func containerIDs(t *testing.T, pod *corev1.Pod) []string {
	t.Helper()
	var ids []string
	for _, cs := range append(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses...) {
		id, ok := strings.CutPrefix(cs.ContainerID, "containerd://")
		if !ok {
			t.Fatalf("container %s has ID %q: not run by containerd", cs.Name, cs.ContainerID)
		}
		ids = append(ids, id)
	}
	return ids
}

// ReplaceExecutor on the real node: the workspace claim's content survives into the new
// executor Pod (read back through the gateway with a new run), and the command running in
// the old one — and the process it detached — are gone from the node with its container.
func TestWorkspaceSurvivesReplaceAndItsCommandsDoNot(t *testing.T) {
	s := startSystem(t)
	w := s.ensure(t, "replace", profileExample)
	content := []byte(fmt.Sprintf("written before the replace at %s\n", time.Now().Format(time.RFC3339Nano)))
	if _, err := w.run.WriteFile(ctx(t), "kept/notes.txt", content, client.CreateParents()); err != nil {
		t.Fatal(err)
	}
	old := s.pod(t, w)
	containers := containerIDs(t, old)
	const marker = 3110
	done := longCommand(t, w.run, marker)

	if err := w.env.Refresh(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.admin.Replace(ctx(t), client.AdminRequest{ID: w.env.ID(), Revision: w.env.Revision(),
		Preconditions: client.PreconditionsOf(w.env.Status()), Reason: "real node test"}); err != nil {
		t.Fatalf("replace: %v", err)
	}
	select {
	case err := <-done:
		t.Logf("the command's call ended: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("the command's call outlived the replacement")
	}
	if err := w.env.WaitReady(ctx(t)); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, time.Minute, "a new executor Pod", func() bool {
		return w.env.Refresh(ctx(t)) == nil && w.env.Status().GetReady() && w.env.Status().GetPodUid() != string(old.UID)
	})
	run := acquire(t, w.env, "run-2")
	got, err := run.ReadFile(ctx(t), "kept/notes.txt")
	if err != nil || !bytes.Equal(got, content) {
		t.Fatalf("after the replace: %q, %v; want %q", got, err, content)
	}
	if pod := s.pod(t, w); pod.Spec.NodeName != old.Spec.NodeName || pod.Spec.Volumes[0].PersistentVolumeClaim.ClaimName != old.Spec.Volumes[0].PersistentVolumeClaim.ClaimName {
		t.Fatalf("the new executor is not the old one's successor on the same claim: %s on %s", pod.Name, pod.Spec.NodeName)
	}
	s.requireGone(t, marker, containers)
}

// RetireEnvironment on the real node, with a detached command still running (its caller
// gone, the run claim expired): the command and what it detached are gone from the node with
// the executor's container, and the termination proof records the exit the kubelet reported
// for the executor container of that Pod — not a simulation's.
func TestRetireEndsRunningCommandsAndRecordsTheRealExit(t *testing.T) {
	s := startSystem(t)
	env, err := s.caller.Ensure(ctx(t), client.EnsureRequest{Owner: owner, BindingID: "retire", Profile: profileExample})
	if err != nil {
		t.Fatal(err)
	}
	// A caller that stops renewing: its claim expires after the minimum lifetime.
	run, err := env.Acquire(ctx(t), client.AcquireOptions{RunID: "vanishing", TTL: client.MinRunTTL, NoRenew: true})
	if err != nil {
		t.Fatal(err)
	}
	w := &workspace{env: env, run: run}
	pod := s.pod(t, w)
	containers := containerIDs(t, pod)
	const marker = 3120
	// Detached: a foreground command is cut once its run claim expires unrenewed (its call
	// is fenced at the claim's end); a detached one outlives its claim, until the executor.
	if _, err := run.Start(ctx(t), client.Command{Shell: fmt.Sprintf("setsid sleep %d & sleep %d", marker+1, marker)},
		client.StartOptions{ID: "long"}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, 30*time.Second, "the command's processes on the node", func() bool {
		return len(hostProcesses(fmt.Sprintf("sleep\x00%d", marker))) == 1 && len(hostProcesses(fmt.Sprintf("sleep\x00%d", marker+1))) == 1
	})

	// Every state the executor Pod passes through, until it is gone.
	watch, err := s.cluster.Kube().CoreV1().Pods(pod.Namespace).Watch(ctx(t), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", pod.Name).String(), ResourceVersion: pod.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Stop()
	var terminated *corev1.ContainerStateTerminated
	var terminatedID string
	seen := make(chan struct{})
	go func() {
		defer close(seen)
		for ev := range watch.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || p.UID != pod.UID {
				continue
			}
			for _, cs := range p.Status.ContainerStatuses {
				if cs.Name == executor.ContainerName && cs.State.Terminated != nil {
					terminated, terminatedID = cs.State.Terminated.DeepCopy(), cs.ContainerID
				}
			}
		}
	}()

	// The claim expires unrenewed; then, with the command still running, the retirement.
	clustertest.Eventually(t, 2*client.MinRunTTL, "the run claim expired", func() bool {
		if err := env.Refresh(ctx(t)); err != nil {
			t.Fatal(err)
		}
		return time.Now().After(env.Status().GetActiveRun().GetExpiresAt().AsTime().Add(time.Second))
	})
	if len(hostProcesses(fmt.Sprintf("sleep\x00%d", marker))) != 1 {
		t.Fatal("the command stopped before the retirement: the test would prove nothing")
	}
	if _, err := s.admin.Retire(ctx(t), client.AdminRequest{ID: env.ID(), Revision: env.Revision(),
		Preconditions: client.Preconditions{Epoch: client.PreconditionsOf(env.Status()).Epoch}, Reason: "real node test"}); err != nil {
		t.Fatalf("retire: %v", err)
	}
	clustertest.Eventually(t, 2*time.Minute, "the executor retired", func() bool {
		return env.Refresh(ctx(t)) == nil && env.Status().GetPodUid() == ""
	})
	clustertest.Eventually(t, time.Minute, "the executor Pod gone", func() bool {
		_, err := s.cluster.Kube().CoreV1().Pods(pod.Namespace).Get(ctx(t), pod.Name, metav1.GetOptions{})
		return err != nil
	})
	watch.Stop()
	<-seen
	s.requireGone(t, marker, containers)

	if terminated == nil {
		t.Fatal("the kubelet never reported the executor container terminated")
	}
	if !strings.HasPrefix(terminatedID, "containerd://") || terminated.FinishedAt.IsZero() {
		t.Fatalf("terminated state not from the runtime: %s %+v", terminatedID, terminated)
	}
	cr, err := s.exec.ExecutionV1alpha1().ExecutionEnvironments(s.ExecutorNamespace()).Get(ctx(t), env.ID(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	proof := cr.Status.TerminationProof
	if proof == nil || proof.PodUID != pod.UID || proof.ExitCode == nil {
		t.Fatalf("termination proof: %+v", proof)
	}
	if *proof.ExitCode != terminated.ExitCode || proof.Reason != terminated.Reason {
		t.Fatalf("the proof records exit %d (%s); the kubelet reported %d (%s)", *proof.ExitCode, proof.Reason, terminated.ExitCode, terminated.Reason)
	}
	t.Logf("termination proof: phase %s, exit %d, reason %s; the kubelet: exit %d, reason %s, finished %s",
		proof.PodPhase, *proof.ExitCode, proof.Reason, terminated.ExitCode, terminated.Reason, terminated.FinishedAt.Format(time.RFC3339))
}

// escapeBound is how long a revocation may take to end what escaped its supervisor: the
// gateway's second ask (15 s after the first, for what a first pass could not see — here,
// processes still under the closing session's helper), plus the grace and the kill.
const escapeBound = 30 * time.Second

// A detached command that kills its own supervisor leaves no record that could be
// signalled: a revocation still ends it. Its processes, reparented to the executor's main
// process, are swept because no proved running record names them — with no call after the
// revoke, as the node's process table shows.
//
// The gateway's sessions close after a second idle, and the command waits 4 s before it
// kills its supervisor: by then the session's helper (a subreaper, which would sweep them
// itself when it ends) is gone, so the orphans are the executor's main process's — what
// only the revocation's sweep reaches.
func TestRevocationSweepsWhatEscapedItsSupervisor(t *testing.T) {
	s := startSystem(t, "--session-idle=1s")
	w := s.ensure(t, "escape", profileExample)
	const marker = 3140
	// $PPID is the supervisor: the command kills it, then waits on its two sleeps (one in
	// a session of its own).
	if _, err := w.run.Start(ctx(t), client.Command{Shell: fmt.Sprintf("setsid sleep %d & sleep %d & sleep 4; kill -9 $PPID; wait", marker+1, marker)},
		client.StartOptions{ID: "escape"}); err != nil {
		t.Fatal(err)
	}
	// No call for these seconds: the session idles out.
	clustertest.Eventually(t, 30*time.Second, "the command's processes on the node, its supervisor gone", func() bool {
		return len(hostProcesses(fmt.Sprintf("sleep\x00%d", marker))) == 1 && len(hostProcesses(fmt.Sprintf("sleep\x00%d", marker+1))) == 1 &&
			len(hostProcesses("execplane-helper-supervisor")) == 0
	})
	if pids := hostProcesses(devimage.HelperPath + "\x00--session\x00"); len(pids) > 0 {
		var lines []string
		for _, pid := range pids {
			cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			lines = append(lines, fmt.Sprintf("%d %q", pid, cmdline))
		}
		t.Fatalf("a session helper still runs: the orphans are its, and the test would not reach the sweep:\n%s", strings.Join(lines, "\n"))
	}
	if err := w.env.Refresh(ctx(t)); err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	if _, err := s.admin.Revoke(ctx(t), client.AdminRequest{ID: w.env.ID(), Revision: w.env.Revision(),
		Preconditions: client.Preconditions{GrantGeneration: ptrTo(w.env.Status().GetGrantGeneration())}, Reason: "escape"}); err != nil {
		t.Fatal(err)
	}
	// No call from here on until the processes are gone.
	clustertest.Eventually(t, escapeBound, "what escaped its supervisor is gone from the node", func() bool {
		return len(hostProcesses(fmt.Sprintf("sleep\x00%d", marker))) == 0 && len(hostProcesses(fmt.Sprintf("sleep\x00%d", marker+1))) == 0
	})
	t.Logf("the escaped command's processes were gone %s after the revoke", time.Since(revoked).Round(time.Millisecond))
}

func ptrTo[T any](v T) *T { return &v }
