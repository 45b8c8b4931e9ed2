package controller_test

import (
	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/execplane/execplane/internal/controller"
	"github.com/execplane/execplane/internal/executor"
	v1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
)

var opSeq atomic.Int64

func (g *rig) waitReady(t *testing.T, name string) *v1alpha1.ExecutionEnvironment {
	t.Helper()
	var env *v1alpha1.ExecutionEnvironment
	clustertest.Eventually(t, 30*time.Second, name+" Ready", func() bool {
		env = g.get(t, name)
		return meta.IsStatusConditionTrue(env.Status.Conditions, v1alpha1.ConditionReady)
	})
	return env
}

// request admits a lifecycle operation the way the store does: naming the recorded objects.
func (g *rig) request(t *testing.T, name string, kind v1alpha1.LifecycleKind, edit func(*v1alpha1.LifecycleOperation)) {
	t.Helper()
	envs := g.exec.ExecutionV1alpha1().ExecutionEnvironments(g.ns)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		env := g.get(t, name)
		op := &v1alpha1.LifecycleOperation{Kind: kind, Phase: v1alpha1.PhaseRequested,
			OperationID: "op-" + strconv.FormatInt(opSeq.Add(1), 10), StartedAt: metav1.Now()}
		if env.Status.Pod != nil {
			op.ExpectedPodUID = env.Status.Pod.UID
		}
		if env.Status.PVC != nil {
			op.ExpectedPVCUID = env.Status.PVC.UID
		}
		if edit != nil {
			edit(op)
		}
		env.Status.LifecycleOperation = op
		_, err := envs.UpdateStatus(g.ctx, env, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func (g *rig) waitCompleted(t *testing.T, name string, kind v1alpha1.LifecycleKind) *v1alpha1.ExecutionEnvironment {
	t.Helper()
	var env *v1alpha1.ExecutionEnvironment
	clustertest.Eventually(t, 30*time.Second, string(kind)+" completed", func() bool {
		env = g.get(t, name)
		op := env.Status.LifecycleOperation
		return op != nil && op.Kind == kind && op.Phase == v1alpha1.PhaseCompleted
	})
	return env
}

func (g *rig) pods(t *testing.T, env string) []corev1.Pod {
	t.Helper()
	list, err := g.c.Kube().CoreV1().Pods(g.ns).List(g.ctx, metav1.ListOptions{LabelSelector: executor.LabelEnvironment + "=" + env})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func (g *rig) pvcUID(t *testing.T, env string) types.UID {
	t.Helper()
	pvc, err := g.c.Kube().CoreV1().PersistentVolumeClaims(g.ns).Get(g.ctx, env+"-workspace", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pvc.UID
}

func (g *rig) eventReasons(t *testing.T, env *v1alpha1.ExecutionEnvironment) []string {
	t.Helper()
	list, err := g.c.Kube().CoreV1().Events(g.ns).List(g.ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.uid", string(env.UID)).String()})
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, e := range list.Items {
		reasons = append(reasons, e.Reason)
	}
	return reasons
}

func waitEvents(t *testing.T, g *rig, env *v1alpha1.ExecutionEnvironment, want ...string) {
	t.Helper()
	clustertest.Eventually(t, 10*time.Second, "events "+strings.Join(want, ","), func() bool {
		got := g.eventReasons(t, env)
		for _, w := range want {
			if !slices.Contains(got, w) {
				return false
			}
		}
		return true
	})
}

// Retire stops the executor — its terminal state recorded before its finalizer goes — and
// keeps the workspace claim; nothing is recreated afterwards.
func TestRetireStopsExecutorAndKeepsWorkspace(t *testing.T) {
	g := startReconciler(t, "")
	g.create(t, "env-r")
	before := g.waitReady(t, "env-r")
	pvc := g.pvcUID(t, "env-r")
	g.request(t, "env-r", v1alpha1.LifecycleRetire, nil)
	env := g.waitCompleted(t, "env-r", v1alpha1.LifecycleRetire)

	proof := env.Status.TerminationProof
	if proof == nil || proof.PodUID != before.Status.Pod.UID || proof.PodPhase != string(corev1.PodSucceeded) || proof.ExitCode == nil || *proof.ExitCode != 0 {
		t.Fatalf("termination proof %+v", proof)
	}
	if env.Status.Pod != nil || env.Status.Phase != v1alpha1.PhaseRetired || meta.IsStatusConditionTrue(env.Status.Conditions, v1alpha1.ConditionReady) {
		t.Fatalf("retired status %+v", env.Status)
	}
	if c := meta.FindStatusCondition(env.Status.Conditions, v1alpha1.ConditionExecutorReady); c == nil || c.Reason != "Retired" {
		t.Fatalf("ExecutorReady %+v", c)
	}
	if g.pvcUID(t, "env-r") != pvc || env.Status.PVC == nil || env.Status.PVC.UID != pvc {
		t.Fatal("the workspace claim changed")
	}
	waitEvents(t, g, env, controller.EventStoppingExecutor, controller.EventTerminationRecorded, controller.EventRetired)
	time.Sleep(2 * time.Second)
	if pods := g.pods(t, "env-r"); len(pods) != 0 {
		t.Fatalf("a retired environment has executor %s", pods[0].Name)
	}
}

// Replace stops the executor and starts a new one on the same claim, at epoch + 1.
func TestReplaceKeepsWorkspaceAndRaisesEpoch(t *testing.T) {
	g := startReconciler(t, "")
	g.create(t, "env-p")
	before := g.waitReady(t, "env-p")
	pvc := g.pvcUID(t, "env-p")
	g.request(t, "env-p", v1alpha1.LifecycleReplace, nil)
	g.waitCompleted(t, "env-p", v1alpha1.LifecycleReplace)
	env := g.waitReady(t, "env-p")

	st := env.Status
	if st.Epoch != before.Status.Epoch+1 || st.Pod == nil || st.Pod.UID == before.Status.Pod.UID || st.Pod.Name != "env-p-x1" {
		t.Fatalf("after replace: epoch %d pod %+v", st.Epoch, st.Pod)
	}
	if r := st.LastReplacement; r == nil || r.OldPodUID != before.Status.Pod.UID || r.NewPodUID != st.Pod.UID || r.Epoch != st.Epoch {
		t.Fatalf("last replacement %+v", r)
	}
	if st.TerminationProof == nil || st.TerminationProof.PodUID != before.Status.Pod.UID {
		t.Fatalf("termination proof %+v", st.TerminationProof)
	}
	if g.pvcUID(t, "env-p") != pvc {
		t.Fatal("the workspace claim changed")
	}
	if pods := g.pods(t, "env-p"); len(pods) != 1 || pods[0].UID != st.Pod.UID {
		t.Fatalf("%d executor Pods after replace", len(pods))
	}
	waitEvents(t, g, env, controller.EventExecutorReplaced)
}

// DeleteRetired deletes the claim, then the resource; on an environment that still has an
// executor it waits, says why once, and deletes nothing.
func TestDeleteRetired(t *testing.T) {
	g := startReconciler(t, "")
	g.create(t, "env-d")
	g.waitReady(t, "env-d")
	pvc := g.pvcUID(t, "env-d")

	g.request(t, "env-d", v1alpha1.LifecycleDeleteRetired, nil)
	var env *v1alpha1.ExecutionEnvironment
	clustertest.Eventually(t, 10*time.Second, "the operation says why it waits", func() bool {
		env = g.get(t, "env-d")
		return env.Status.LifecycleOperation.Reason != ""
	})
	if env.Status.LifecycleOperation.Phase != v1alpha1.PhaseRequested || g.pvcUID(t, "env-d") != pvc || len(g.pods(t, "env-d")) != 1 {
		t.Fatalf("a blocked DeleteRetired acted: %+v", env.Status.LifecycleOperation)
	}
	waitEvents(t, g, env, controller.EventOperationBlocked)
	rv := env.ResourceVersion
	time.Sleep(2 * time.Second)
	if g.get(t, "env-d").ResourceVersion != rv {
		t.Fatal("a waiting operation kept writing")
	}

	g.request(t, "env-d", v1alpha1.LifecycleRetire, nil)
	g.waitCompleted(t, "env-d", v1alpha1.LifecycleRetire)
	g.request(t, "env-d", v1alpha1.LifecycleDeleteRetired, nil)
	clustertest.Eventually(t, 30*time.Second, "the environment is gone", func() bool {
		_, err := g.exec.ExecutionV1alpha1().ExecutionEnvironments(g.ns).Get(g.ctx, "env-d", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	if _, err := g.c.Kube().CoreV1().PersistentVolumeClaims(g.ns).Get(g.ctx, "env-d-workspace", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the claim survived DeleteRetired: %v", err)
	}
}

// A plain delete of the resource only reports DeletionBlocked: the finalizer, the claim and
// the executor stay; the exact administrative path still completes afterwards.
func TestKubectlDeleteOnlyBlocks(t *testing.T) {
	g := startReconciler(t, "")
	g.create(t, "env-k")
	g.waitReady(t, "env-k")
	pvc := g.pvcUID(t, "env-k")
	if err := g.exec.ExecutionV1alpha1().ExecutionEnvironments(g.ns).Delete(g.ctx, "env-k", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var env *v1alpha1.ExecutionEnvironment
	clustertest.Eventually(t, 10*time.Second, "DeletionBlocked", func() bool {
		env = g.get(t, "env-k")
		return meta.IsStatusConditionTrue(env.Status.Conditions, v1alpha1.ConditionDeletionBlocked)
	})
	if !slices.Contains(env.Finalizers, controller.EnvironmentFinalizer) || g.pvcUID(t, "env-k") != pvc || len(g.pods(t, "env-k")) != 1 {
		t.Fatal("a plain delete removed something")
	}
	waitEvents(t, g, env, controller.EventDeletionBlocked)
	g.request(t, "env-k", v1alpha1.LifecycleRetire, nil)
	g.waitCompleted(t, "env-k", v1alpha1.LifecycleRetire)
	g.request(t, "env-k", v1alpha1.LifecycleDeleteRetired, nil)
	clustertest.Eventually(t, 30*time.Second, "the environment is gone", func() bool {
		_, err := g.exec.ExecutionV1alpha1().ExecutionEnvironments(g.ns).Get(g.ctx, "env-k", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}

// An executor Pod deleted by hand is accounted for — its termination recorded, then released
// — and is not recreated; a Replace brings a new one.
func TestHandDeletedExecutorIsRecordedNotRecreated(t *testing.T) {
	g := startReconciler(t, "")
	g.create(t, "env-h")
	before := g.waitReady(t, "env-h")
	if err := g.c.Kube().CoreV1().Pods(g.ns).Delete(g.ctx, before.Status.Pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var env *v1alpha1.ExecutionEnvironment
	clustertest.Eventually(t, 30*time.Second, "the Pod is released and forgotten", func() bool {
		env = g.get(t, "env-h")
		return env.Status.Pod == nil && len(g.pods(t, "env-h")) == 0
	})
	if env.Status.FenceState != v1alpha1.FenceHealthy || env.Status.TerminationProof == nil || env.Status.TerminationProof.PodUID != before.Status.Pod.UID {
		t.Fatalf("status %+v", env.Status)
	}
	time.Sleep(2 * time.Second)
	if pods := g.pods(t, "env-h"); len(pods) != 0 {
		t.Fatal("the executor was recreated without a Replace")
	}
	g.request(t, "env-h", v1alpha1.LifecycleReplace, nil)
	g.waitCompleted(t, "env-h", v1alpha1.LifecycleReplace)
	if env = g.waitReady(t, "env-h"); env.Status.Epoch != 1 {
		t.Fatalf("epoch %d", env.Status.Epoch)
	}
}

// An operation naming another executor than the recorded one fences instead of acting.
func TestOperationOnUnexpectedExecutorFences(t *testing.T) {
	g := startReconciler(t, "")
	g.create(t, "env-u")
	before := g.waitReady(t, "env-u")
	g.request(t, "env-u", v1alpha1.LifecycleReplace, func(op *v1alpha1.LifecycleOperation) { op.ExpectedPodUID = "not-the-recorded-uid" })
	var env *v1alpha1.ExecutionEnvironment
	clustertest.Eventually(t, 10*time.Second, "FenceUnknown", func() bool {
		env = g.get(t, "env-u")
		return env.Status.FenceState == v1alpha1.FenceUnknown
	})
	pods := g.pods(t, "env-u")
	if len(pods) != 1 || pods[0].UID != before.Status.Pod.UID || pods[0].DeletionTimestamp != nil {
		t.Fatal("the fenced operation touched the executor")
	}
	if env.Status.LifecycleOperation.Phase != v1alpha1.PhaseRequested {
		t.Fatalf("phase %s", env.Status.LifecycleOperation.Phase)
	}
}

// An executor whose environment was removed by force (finalizer stripped) is deleted and
// released rather than held forever; its workspace claim is kept.
func TestOrphanedExecutorIsReleased(t *testing.T) {
	g := startReconciler(t, "")
	g.create(t, "env-o")
	g.waitReady(t, "env-o")
	envs := g.exec.ExecutionV1alpha1().ExecutionEnvironments(g.ns)
	// Delete, then strip the finalizer, as an operator forcing removal does. (Stripping first
	// races the reconciler, which rightly puts its finalizer back on a live object; once the
	// object is being deleted no finalizer can be added.)
	if err := envs.Delete(g.ctx, "env-o", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := envs.Patch(g.ctx, "env-o", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, 30*time.Second, "no executor left", func() bool { return len(g.pods(t, "env-o")) == 0 })
	g.pvcUID(t, "env-o") // still there
}
