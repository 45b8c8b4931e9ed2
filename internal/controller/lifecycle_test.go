package controller_test

import (
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/execplane/execplane/internal/controller"
	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/internal/executor"
	v1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
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

	want := retired{
		ProofPodUID: before.Status.Pod.UID, ProofPhase: string(corev1.PodSucceeded), ExitCode: ptrTo[int32](0),
		Phase: v1alpha1.PhaseRetired, Ready: metav1.ConditionFalse, ExecutorReason: "Retired",
		RecordedPVC: pvc, LivePVC: pvc,
	}
	if diff := cmp.Diff(want, retiredOf(t, g, env)); diff != "" {
		t.Fatalf("after Retire (-want +got):\n%s", diff)
	}
	waitEvents(t, g, env, controller.EventStoppingExecutor, controller.EventTerminationRecorded, controller.EventRetired)
	// Completing the Retire was the last write; a pass now recreates nothing.
	g.idlePass(t, "env-r")
	if pods := g.pods(t, "env-r"); len(pods) != 0 {
		t.Fatalf("a retired environment has executor %s", pods[0].Name)
	}
}

// retired is what TestRetireStopsExecutorAndKeepsWorkspace checks after a Retire: the
// termination proof, the status, and the workspace claim as recorded and as it lives.
type retired struct {
	ProofPodUID    types.UID
	ProofPhase     string
	ExitCode       *int32
	PodRecorded    bool
	Phase          v1alpha1.Phase
	Ready          metav1.ConditionStatus
	ExecutorReason string
	RecordedPVC    types.UID
	LivePVC        types.UID
}

func retiredOf(t *testing.T, g *rig, env *v1alpha1.ExecutionEnvironment) retired {
	t.Helper()
	st := env.Status
	got := retired{PodRecorded: st.Pod != nil, Phase: st.Phase, LivePVC: g.pvcUID(t, env.Name)}
	if p := st.TerminationProof; p != nil {
		got.ProofPodUID, got.ProofPhase, got.ExitCode = p.PodUID, p.PodPhase, p.ExitCode
	}
	if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionReady); c != nil {
		got.Ready = c.Status
	}
	if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionExecutorReady); c != nil {
		got.ExecutorReason = c.Reason
	}
	if st.PVC != nil {
		got.RecordedPVC = st.PVC.UID
	}
	return got
}

func ptrTo[T any](v T) *T { return &v }

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
	if st.Pod == nil || st.Pod.UID == before.Status.Pod.UID {
		t.Fatalf("after replace: pod %+v (before: %+v)", st.Pod, before.Status.Pod)
	}
	type replaced struct {
		Epoch       int64
		PodName     string
		Replacement v1alpha1.Replacement
		ProofPodUID types.UID
	}
	want := replaced{Epoch: before.Status.Epoch + 1, PodName: "env-p-x1",
		Replacement: v1alpha1.Replacement{OldPodUID: before.Status.Pod.UID, NewPodUID: st.Pod.UID, Epoch: before.Status.Epoch + 1},
		ProofPodUID: before.Status.Pod.UID}
	got := replaced{Epoch: st.Epoch, PodName: st.Pod.Name}
	if r := st.LastReplacement; r != nil {
		got.Replacement = *r
		got.Replacement.CompletedAt = metav1.Time{} // the reconciler's clock
	}
	if st.TerminationProof != nil {
		got.ProofPodUID = st.TerminationProof.PodUID
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("after replace (-want +got):\n%s", diff)
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
	type untouched struct {
		Phase     v1alpha1.LifecyclePhase
		PVC       types.UID
		Executors int
	}
	if diff := cmp.Diff(untouched{v1alpha1.PhaseRequested, pvc, 1},
		untouched{env.Status.LifecycleOperation.Phase, g.pvcUID(t, "env-d"), len(g.pods(t, "env-d"))}); diff != "" {
		t.Fatalf("a blocked DeleteRetired acted (-want +got):\n%s", diff)
	}
	waitEvents(t, g, env, controller.EventOperationBlocked)
	// The reason was the one write the wait costs: nothing since, and a pass now (the
	// operation still blocked) writes nothing.
	if read := g.idlePass(t, "env-d"); read.ResourceVersion != env.ResourceVersion {
		t.Fatalf("a waiting operation kept writing (resourceVersion %s -> %s); status (-then +now):\n%s",
			env.ResourceVersion, read.ResourceVersion, cmp.Diff(env.Status, read.Status))
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
	type kept struct {
		Finalizer bool
		PVC       types.UID
		Executors int
	}
	if diff := cmp.Diff(kept{true, pvc, 1},
		kept{slices.Contains(env.Finalizers, controller.EnvironmentFinalizer), g.pvcUID(t, "env-k"), len(g.pods(t, "env-k"))}); diff != "" {
		t.Fatalf("a plain delete removed something (-want +got):\n%s", diff)
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
	type accounted struct {
		Fence       v1alpha1.FenceState
		ProofPodUID types.UID
	}
	got := accounted{Fence: env.Status.FenceState}
	if p := env.Status.TerminationProof; p != nil {
		got.ProofPodUID = p.PodUID
	}
	if diff := cmp.Diff(accounted{v1alpha1.FenceHealthy, before.Status.Pod.UID}, got); diff != "" {
		t.Fatalf("after the hand delete (-want +got):\n%s", diff)
	}
	// Forgetting the Pod was the last write; a pass now recreates nothing.
	g.idlePass(t, "env-h")
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
	type liveExecutor struct {
		UID      types.UID
		Deleting bool
	}
	var live []liveExecutor
	for _, p := range g.pods(t, "env-u") {
		live = append(live, liveExecutor{p.UID, p.DeletionTimestamp != nil})
	}
	if diff := cmp.Diff([]liveExecutor{{UID: before.Status.Pod.UID}}, live); diff != "" {
		t.Fatalf("the fenced operation touched the executor (-want +got):\n%s", diff)
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
