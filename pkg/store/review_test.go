package store_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/execplane/execplane/pkg/apierror"
	v1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/authority"
	"github.com/execplane/execplane/pkg/profile/profiletest"
	"github.com/execplane/execplane/pkg/store"
)

// Identical concurrent Ensure calls at a profile's last slot all succeed: only the first
// needs the slot.
func TestIdenticalEnsuresAtCapacityAllSucceed(t *testing.T) {
	f := newFixture(t, options{maxEnvironments: 1})
	var wg sync.WaitGroup
	errs := make([]error, 20)
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = f.store.Ensure(f.ctx, store.EnsureInput{Caller: agentA, OperationID: fmt.Sprintf("same-%d", i), Owner: alice, BindingID: "only", Profile: "python"})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if _, err := f.store.Ensure(f.ctx, store.EnsureInput{Caller: agentA, OperationID: opID(), Owner: alice, BindingID: "another", Profile: "python"}); !errors.Is(err, apierror.ErrLimitExceeded) {
		t.Fatalf("a second binding at capacity: %v", err)
	}
}

// Operations that would race the first provisioning, or build an executor from a profile
// that changed, are refused; a deleting environment accepts no new reference.
func TestAdministrationRefusedWhenItCannotFinish(t *testing.T) {
	f := newFixture(t, options{}) // no reconciler: the first executor is never recorded
	env := f.ensure(t, agentA, alice, "conv-p").Environment
	r := ref(env)
	zero := ptrTo[uint64](0)
	if _, err := f.store.Retire(f.ctx, store.AdminInput{Caller: admin, OperationID: opID(), Environment: r, Preconditions: store.Preconditions{Epoch: zero}}); !errors.Is(err, apierror.ErrNotReady) {
		t.Fatalf("retire while provisioning: %v", err)
	}
	if _, err := f.store.ReplaceExecutor(f.ctx, store.AdminInput{Caller: admin, OperationID: opID(), Environment: r, Preconditions: store.Preconditions{Epoch: zero, PodUID: ptrTo("")}}); !errors.Is(err, apierror.ErrNotReady) {
		t.Fatalf("replace while provisioning: %v", err)
	}
	// A profile registry where "python" changed.
	changed, _ := profiletest.Registry(t, strings.Replace(profiletest.YAML(100), "memoryLimit: 64Mi", "memoryLimit: 128Mi", 1))
	other, err := store.New(store.Config{Execution: f.exec, Kube: f.c.Kube(), Environments: f.lister, Namespace: f.ns, Profiles: changed, Finalizer: "execution.mecatl.dev/delete-retired"})
	if err != nil {
		t.Fatal(err)
	}
	// Pretend the first executor was recorded, so that only the profile stands in the way.
	e := f.get(t, env.Name)
	e.Status.Pod = &v1alpha1.ObjectIdentity{Name: env.Name + "-x0", UID: types.UID("00000000-0000-4000-8000-00000000000a")}
	if _, err := f.exec.ExecutionV1alpha1().ExecutionEnvironments(f.ns).UpdateStatus(f.ctx, e, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := other.ReplaceExecutor(f.ctx, store.AdminInput{Caller: admin, OperationID: opID(), Environment: r, Preconditions: store.Preconditions{Epoch: zero, PodUID: ptrTo(string(e.Status.Pod.UID))}}); !errors.Is(err, apierror.ErrNotReady) {
		t.Fatalf("replace under a changed profile: %v", err)
	}
	// A plain delete of the resource: no reference is published any more.
	if err := f.exec.ExecutionV1alpha1().ExecutionEnvironments(f.ns).Delete(f.ctx, env.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	before := f.snapshot(t, env.Name)
	if _, err := f.store.CommitReference(f.ctx, store.ReferenceInput{Caller: agentA, OperationID: opID(), Owner: alice, Environment: r, BindingID: "conv-p"}); !errors.Is(err, apierror.ErrNotReady) {
		t.Fatalf("commit on a deleting environment: %v", err)
	}
	if _, err := f.store.Ensure(f.ctx, store.EnsureInput{Caller: agentA, OperationID: opID(), Owner: alice, BindingID: "conv-p", Profile: "python"}); err != nil {
		t.Fatalf("an Ensure that adds nothing still answers: %v", err)
	}
	if string(f.snapshot(t, env.Name)) != string(before) {
		t.Fatal("a refusal wrote")
	}
}

// A fenced environment whose executor is still alive is not recovered by declaration: the
// executor must go first.
func TestRecoverRefusedWhileTheExecutorLives(t *testing.T) {
	f := newFixture(t, options{reconcile: true})
	env := f.ensure(t, agentA, alice, "conv-live").Environment
	env = f.waitReady(t, env.Name)
	r := ref(env)
	// A lifecycle operation naming another executor fences, leaving the live one alone.
	e := f.get(t, env.Name)
	e.Status.LifecycleOperation = &v1alpha1.LifecycleOperation{Kind: v1alpha1.LifecycleReplace, Phase: v1alpha1.PhaseRequested, OperationID: "bogus",
		ExpectedPodUID: "00000000-0000-4000-8000-00000000000b", StartedAt: metav1.Now()}
	if _, err := f.exec.ExecutionV1alpha1().ExecutionEnvironments(f.ns).UpdateStatus(f.ctx, e, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, 20*time.Second, "fenced", func() bool {
		env = f.get(t, env.Name)
		return env.Status.FenceState == v1alpha1.FenceUnknown
	})
	_, err := f.store.RecoverEnvironment(f.ctx, store.AdminInput{Caller: admin, OperationID: opID(), Environment: r,
		Preconditions: store.Preconditions{Epoch: ptrTo(uint64(env.Status.Epoch)), PodUID: ptrTo(string(env.Status.Pod.UID))}})
	if !errors.Is(err, apierror.ErrNotReady) {
		t.Fatalf("recover with the executor alive: %v", err)
	}
}

// A workspace lost under a fenced environment cannot be recovered; the environment can
// only be deleted, and DeleteRetired then completes.
func TestLostWorkspaceCanOnlyBeDeleted(t *testing.T) {
	f := newFixture(t, options{reconcile: true})
	env := f.ensure(t, agentA, alice, "conv-lost").Environment
	env = f.waitReady(t, env.Name)
	r := ref(env)
	kube := f.c.Kube().CoreV1()
	strip := []byte(`{"metadata":{"finalizers":null}}`)
	if _, err := kube.Pods(f.ns).Patch(f.ctx, env.Status.Pod.Name, types.MergePatchType, strip, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := kube.Pods(f.ns).Delete(f.ctx, env.Status.Pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptrTo[int64](0)}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.PersistentVolumeClaims(f.ns).Patch(f.ctx, env.Status.PVC.Name, types.MergePatchType, strip, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := kube.PersistentVolumeClaims(f.ns).Delete(f.ctx, env.Status.PVC.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	clustertest.Eventually(t, 20*time.Second, "fenced", func() bool {
		env = f.get(t, env.Name)
		_, err := kube.PersistentVolumeClaims(f.ns).Get(f.ctx, env.Status.PVC.Name, metav1.GetOptions{})
		return env.Status.FenceState == v1alpha1.FenceUnknown && apierrors.IsNotFound(err)
	})
	epoch := ptrTo(uint64(env.Status.Epoch))
	if _, err := f.store.RecoverEnvironment(f.ctx, store.AdminInput{Caller: admin, OperationID: opID(), Environment: r,
		Preconditions: store.Preconditions{Epoch: epoch, PodUID: ptrTo(string(env.Status.Pod.UID))}}); !errors.Is(err, apierror.ErrNotReady) {
		t.Fatalf("recover a lost workspace: %v", err)
	}
	if _, err := f.store.DeleteRetiredEnvironment(f.ctx, store.AdminInput{Caller: admin, OperationID: opID(), Environment: r,
		Preconditions: store.Preconditions{PVCUID: ptrTo(string(env.Status.PVC.UID))}}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, 30*time.Second, "deleted", func() bool {
		_, err := f.exec.ExecutionV1alpha1().ExecutionEnvironments(f.ns).Get(f.ctx, env.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}

// Renewals replace their predecessor's receipt (a heartbeat cannot flush the ring); an
// expired claim cannot be renewed, but can always be released, even after its binding's
// reference went.
func TestRenewalsAndReleaseOfAClaim(t *testing.T) {
	f := newFixture(t, options{reconcile: true})
	env := f.ensure(t, agentA, alice, "conv-hb").Environment
	env = f.waitReady(t, env.Name)
	r := ref(env)
	acq, err := f.store.AcquireRun(f.ctx, store.AcquireRunInput{Caller: agentA, OperationID: opID(), Environment: r, RunID: "run-1",
		Grant: authority.GrantClaims{BindingID: "conv-hb", Environment: r}})
	if err != nil {
		t.Fatal(err)
	}
	grant := authority.GrantClaims{BindingID: "conv-hb", Environment: r, Epoch: uint64(acq.Run.Epoch), RunID: "run-1", ClaimID: acq.Run.ClaimID}
	for range 40 {
		if _, err := f.store.RenewRun(f.ctx, store.RenewRunInput{Caller: agentA, OperationID: opID(), Grant: grant, Environment: r}); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(f.get(t, env.Name).Status.Receipts); n > 4 {
		t.Fatalf("%d receipts after 40 renewals", n)
	}
	later, err := store.New(store.Config{Execution: f.exec, Kube: f.c.Kube(), Environments: f.lister, Namespace: f.ns, Profiles: f.profiles,
		Finalizer: "execution.mecatl.dev/delete-retired", Now: func() time.Time { return time.Now().Add(time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := later.RenewRun(f.ctx, store.RenewRunInput{Caller: agentA, OperationID: opID(), Grant: grant, Environment: r}); !errors.Is(err, apierror.ErrStaleEpoch) {
		t.Fatalf("renewing an expired claim: %v", err)
	}
	if _, err := f.store.CommitReference(f.ctx, store.ReferenceInput{Caller: agentA, OperationID: opID(), Owner: alice, Environment: r, BindingID: "conv-hb"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.ReleaseReference(f.ctx, store.ReferenceInput{Caller: agentA, OperationID: opID(), Owner: alice, Environment: r, BindingID: "conv-hb"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.ReleaseRun(f.ctx, store.ReleaseRunInput{Caller: agentA, OperationID: opID(), Grant: grant, Environment: r}); err != nil {
		t.Fatalf("release after the reference went: %v", err)
	}
	if f.get(t, env.Name).Status.ActiveRun != nil {
		t.Fatal("the claim survived its release")
	}
}
