package controller_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/internal/executor"
	"github.com/execplane/execplane/internal/failpoint"
	v1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
)

// waitKilled waits for the replica to die by SIGKILL (its armed failpoint).
func (r *replica) waitKilled(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case err := <-r.done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("%s exited with %v, not by a signal", r.id, err)
		}
		ws, _ := ee.Sys().(syscall.WaitStatus)
		if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("%s exited with %v, not SIGKILL", r.id, err)
		}
	case <-time.After(d):
		t.Fatalf("%s: the failpoint never fired", r.id)
	}
}

// converged asserts the objects an environment should have after a restart: one claim with
// the first claim's UID, the executors wanted (0 or 1, none left terminating), every recorded
// identity matching a live object, and no fence.
func (g *rig) converged(t *testing.T, name string, claim types.UID, executors int) *v1alpha1.ExecutionEnvironment {
	t.Helper()
	var env *v1alpha1.ExecutionEnvironment
	var pods []corev1.Pod
	clustertest.Eventually(t, 30*time.Second, name+" converged", func() bool {
		env = g.get(t, name)
		pods = g.pods(t, name)
		if len(pods) != executors || (executors == 1 && (env.Status.Pod == nil || env.Status.Pod.UID != pods[0].UID)) {
			return false
		}
		return executors == 0 || meta.IsStatusConditionTrue(env.Status.Conditions, v1alpha1.ConditionReady)
	})
	if env.Status.FenceState != v1alpha1.FenceHealthy {
		t.Fatalf("fenced: %s", env.Status.FenceReason)
	}
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			t.Fatalf("executor %s left terminating", p.Name)
		}
	}
	claims, err := g.c.Kube().CoreV1().PersistentVolumeClaims(g.ns).List(g.ctx, metav1.ListOptions{LabelSelector: executor.LabelEnvironment + "=" + name})
	if err != nil {
		t.Fatal(err)
	}
	// Exactly one claim, the first one when the test knows it, and the one recorded.
	type workspace struct {
		Live     []types.UID
		Recorded types.UID
	}
	got := workspace{}
	for _, c := range claims.Items {
		got.Live = append(got.Live, c.UID)
	}
	if env.Status.PVC != nil {
		got.Recorded = env.Status.PVC.UID
	}
	first := claim
	if first == "" && len(got.Live) == 1 {
		first = got.Live[0]
	}
	if diff := cmp.Diff(workspace{Live: []types.UID{first}, Recorded: first}, got); diff != "" {
		t.Fatalf("workspace claims (-want +got):\n%s", diff)
	}
	return env
}

// The controller process killed (SIGKILL) at each named failpoint — after creating the
// claim, after creating the Pod, inside every lifecycle phase, before releasing a finalizer
// — then restarted converges with no duplicate and no orphaned Pod or claim.
func TestKilledAtFailpointsConverges(t *testing.T) {
	type scenario struct {
		point string
		// before runs under the armed controller until the point fires.
		before func(t *testing.T, g *rig)
		// after checks convergence under a restarted, unarmed controller.
		after func(t *testing.T, g *rig, claim types.UID)
	}
	provisioned := func(t *testing.T, g *rig, claim types.UID) { g.converged(t, "env", claim, 1) }
	lifecycle := func(kinds ...v1alpha1.LifecycleKind) func(t *testing.T, g *rig) {
		return func(t *testing.T, g *rig) {
			g.waitReady(t, "env")
			for i, kind := range kinds {
				g.request(t, "env", kind, nil)
				if i < len(kinds)-1 {
					g.waitCompleted(t, "env", kind)
				}
			}
		}
	}
	replaced := func(t *testing.T, g *rig, claim types.UID) {
		g.waitCompleted(t, "env", v1alpha1.LifecycleReplace)
		env := g.converged(t, "env", claim, 1)
		if env.Status.Epoch != 1 || env.Status.Pod.Name != "env-x1" {
			t.Fatalf("after replace: epoch %d, pod %s", env.Status.Epoch, env.Status.Pod.Name)
		}
	}
	retired := func(t *testing.T, g *rig, claim types.UID) {
		g.waitCompleted(t, "env", v1alpha1.LifecycleRetire)
		env := g.converged(t, "env", claim, 0)
		if env.Status.Pod != nil || env.Status.TerminationProof == nil {
			t.Fatalf("after retire: %+v", env.Status)
		}
	}
	suspended := func(t *testing.T, g *rig, claim types.UID) {
		g.waitCompleted(t, "env", v1alpha1.LifecycleSuspend)
		env := g.converged(t, "env", claim, 0)
		if env.Status.Pod != nil || env.Status.Phase != v1alpha1.PhaseSuspended {
			t.Fatalf("after suspend: pod %v, phase %s", env.Status.Pod, env.Status.Phase)
		}
	}
	resumed := func(t *testing.T, g *rig, claim types.UID) {
		g.waitCompleted(t, "env", v1alpha1.LifecycleResume)
		env := g.converged(t, "env", claim, 1)
		if env.Status.Epoch != 1 || env.Status.Pod.Name != "env-x1" {
			t.Fatalf("after resume: epoch %d, pod %s", env.Status.Epoch, env.Status.Pod.Name)
		}
	}
	deleted := func(t *testing.T, g *rig, _ types.UID) {
		clustertest.Eventually(t, 30*time.Second, "the environment and its claim are gone", func() bool {
			_, err := g.exec.ExecutionV1alpha1().ExecutionEnvironments(g.ns).Get(g.ctx, "env", metav1.GetOptions{})
			_, cerr := g.c.Kube().CoreV1().PersistentVolumeClaims(g.ns).Get(g.ctx, "env-workspace", metav1.GetOptions{})
			return apierrors.IsNotFound(err) && apierrors.IsNotFound(cerr) && len(g.pods(t, "env")) == 0
		})
	}
	scenarios := []scenario{
		{point: "after-pvc-create", after: provisioned},
		{point: "after-pod-create", after: provisioned},
		{point: "lifecycle/Retire/StoppingExecutor", before: lifecycle(v1alpha1.LifecycleRetire), after: retired},
		{point: "lifecycle/Retire/AwaitingTermination", before: lifecycle(v1alpha1.LifecycleRetire), after: retired},
		{point: "before-finalizer-removal", before: lifecycle(v1alpha1.LifecycleRetire), after: retired},
		{point: "lifecycle/Replace/StoppingExecutor", before: lifecycle(v1alpha1.LifecycleReplace), after: replaced},
		{point: "lifecycle/Replace/AwaitingTermination", before: lifecycle(v1alpha1.LifecycleReplace), after: replaced},
		{point: "lifecycle/Replace/CreatingExecutor", before: lifecycle(v1alpha1.LifecycleReplace), after: replaced},
		{point: "lifecycle/Suspend/StoppingExecutor", before: lifecycle(v1alpha1.LifecycleSuspend), after: suspended},
		{point: "lifecycle/Suspend/AwaitingTermination", before: lifecycle(v1alpha1.LifecycleSuspend), after: suspended},
		{point: "lifecycle/Resume/CreatingExecutor", before: lifecycle(v1alpha1.LifecycleSuspend, v1alpha1.LifecycleResume), after: resumed},
		{point: "lifecycle/DeleteRetired/DeletingWorkspace", before: lifecycle(v1alpha1.LifecycleRetire, v1alpha1.LifecycleDeleteRetired), after: deleted},
		{point: "lifecycle/DeleteRetired/DeletingEnvironment", before: lifecycle(v1alpha1.LifecycleRetire, v1alpha1.LifecycleDeleteRetired), after: deleted},
	}
	for _, s := range scenarios {
		t.Run(strings.ReplaceAll(s.point, "/", "-"), func(t *testing.T) {
			t.Parallel()
			g := newRig(t)
			armed := startReplica(t, g.c.Kubeconfig(), g.ns, "replica", failpoint.Env+"="+s.point)
			g.create(t, "env")
			var claim types.UID
			if s.before != nil {
				s.before(t, g)
				claim = g.pvcUID(t, "env")
			}
			armed.waitKilled(t, 60*time.Second)
			if !armed.log.Contains("failpoint " + s.point) {
				t.Fatalf("killed, but not at %s", s.point)
			}
			// The same identity rejoins at once, as a restarted container does.
			startReplica(t, g.c.Kubeconfig(), g.ns, "replica")
			s.after(t, g, claim)
		})
	}
}

// Two controller processes: the leader, stopped (SIGSTOP) just before a status write and
// held past its lease, loses the Lease; the new leader adopts the objects the old one
// created and records them. Resumed, the old leader's stale write is refused (by the
// compare-and-swap, or abandoned once its elector notices) and it exits: nothing is
// duplicated. Which refusal wins is a race between processes; the compare-and-swap itself
// is proven deterministically by TestStaleLeaderStatusWriteLosesTheCAS.
func TestStaleLeaderWriteFails(t *testing.T) {
	g := newRig(t)
	a := startReplica(t, g.c.Kubeconfig(), g.ns, "replica-a", failpoint.Env+"=before-status-write=stop")
	clustertest.Eventually(t, 20*time.Second, "replica-a leads", a.leads)
	b := startReplica(t, g.c.Kubeconfig(), g.ns, "replica-b")
	g.create(t, "env")
	clustertest.Eventually(t, 20*time.Second, "replica-a stops itself before its write", func() bool { return processStopped(a.cmd.Process.Pid) })
	clustertest.Eventually(t, 20*time.Second, "replica-b leads", b.leads)
	env := g.waitReady(t, "env")
	if env.Status.Pod == nil || env.Status.PVC == nil {
		t.Fatalf("the new leader did not record the objects: %+v", env.Status)
	}
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-a.done:
		if err == nil {
			t.Fatal("the stale leader exited 0")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the stale leader kept running")
	}
	// Resumed, the stale leader races its own elector: its write reaches the API server and
	// loses the compare-and-swap, or the elector notices the lost Lease first and the write
	// is abandoned, or the process exits before the stale pass runs again. All are refusals;
	// a success is impossible (the resourceVersion it read is gone).
	switch {
	case a.log.Contains("status write lost the compare-and-swap"):
		t.Log("the stale write reached the API server and lost the compare-and-swap")
	case a.log.Contains("status write abandoned: leadership ended"):
		t.Log("the stale write was abandoned when the lost Lease was noticed")
	case !a.log.Contains("failpoint before-status-write: resumed"):
		t.Log("the process exited on the lost Lease before the stale pass could resume")
	case a.log.Contains("leadership lost: exiting"):
		// Resumed, and the elector ended the process while the write was in flight: no
		// outcome was logged. A success is still impossible (the CAS names a resourceVersion
		// that is gone), and the state checked below would show it.
		t.Log("the process exited on the lost Lease while the stale write was in flight")
	default:
		t.Fatalf("the stale pass resumed, yet its write neither lost the CAS nor was abandoned:\n%s", a.log.String())
	}
	after := g.converged(t, "env", env.Status.PVC.UID, 1)
	if after.Status.Pod.UID != env.Status.Pod.UID {
		t.Fatal("the executor changed after the stale leader resumed")
	}
}

// processStopped reports whether the process is in the stopped state (SIGSTOP).
func processStopped(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// pid (comm) state ...: the state follows the last ')'.
	i := bytes.LastIndexByte(stat, ')')
	return i > 0 && i+2 < len(stat) && stat[i+2] == 'T'
}

// Twenty Replace cycles in a row on a real controller process: the claim keeps its UID, the
// epoch rises by one each time, and a file written into the workspace before the first is
// read back, through pods/exec into the last executor, after the last.
func TestTwentyReplaceCyclesKeepTheWorkspace(t *testing.T) {
	g := newRig(t)
	startReplica(t, g.c.Kubeconfig(), g.ns, "replica")
	g.create(t, "env")
	env := g.waitReady(t, "env")
	claim := g.pvcUID(t, "env")
	const content = "written before the first replacement"
	g.execIn(t, env.Status.Pod.Name, `printf '%s' "$1" > "$EXECPLANE_WORKSPACE_ROOT/marker"`, content)
	const cycles = 20
	start := time.Now()
	for i := 1; i <= cycles; i++ {
		g.request(t, "env", v1alpha1.LifecycleReplace, nil)
		g.waitCompleted(t, "env", v1alpha1.LifecycleReplace)
		env = g.waitReady(t, "env")
		if env.Status.Epoch != int64(i) {
			t.Fatalf("cycle %d: epoch %d", i, env.Status.Epoch)
		}
	}
	t.Logf("%d replacements in %s", cycles, time.Since(start).Round(time.Millisecond))
	env = g.converged(t, "env", claim, 1)
	if got := g.execIn(t, env.Status.Pod.Name, `cat "$EXECPLANE_WORKSPACE_ROOT/marker"`, ""); got != content {
		t.Fatalf("after %d replacements the file reads %q", cycles, got)
	}
}

// execIn runs sh -c script (with $1 = arg) in the executor through pods/exec.
func (g *rig) execIn(t *testing.T, pod, script, arg string) string {
	t.Helper()
	opts := &corev1.PodExecOptions{Container: executor.ContainerName, Command: []string{"sh", "-c", script, "sh", arg}, Stdout: true, Stderr: true}
	req := g.c.Kube().CoreV1().RESTClient().Post().Resource("pods").Namespace(g.ns).Name(pod).SubResource("exec").
		VersionedParams(opts, scheme.ParameterCodec)
	ex, err := remotecommand.NewWebSocketExecutor(g.c.RESTConfig(), "GET", req.URL().String())
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if err := ex.StreamWithContext(g.ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr}); err != nil {
		t.Fatalf("exec in %s: %v: %s", pod, err, stderr.String())
	}
	return stdout.String()
}
