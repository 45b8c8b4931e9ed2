package store_test

import (
	"errors"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/pkg/apierror"
	v1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/authority"
	"github.com/execplane/execplane/pkg/ident"
	"github.com/execplane/execplane/pkg/store"
)

// The owner's delete through the store with the reconciler: refused without side effect
// while another binding holds a reference, NOT_FOUND for another owner or client; admitted
// with the owner's own run claim held (every grant dies at once); completed into a tombstone
// (no executor, no claim, no reference, no finalizer) that answers a repeated delete, and
// nothing else; the binding's next Ensure makes a new environment.
func TestOwnerDelete(t *testing.T) {
	f := newFixture(t, options{reconcile: true})
	const binding = "conv-delete"
	env := f.waitReady(t, f.ensure(t, agentA, alice, binding).Environment.Name)
	r := ref(env)
	target := func(c store.Caller, o store.Owner, b string) store.ReferenceInput {
		return store.ReferenceInput{Caller: c, OperationID: opID(), Owner: o, Environment: r, BindingID: b}
	}
	del := func(in store.ReferenceInput, wait time.Duration) (*store.Result, error) {
		return f.store.DeleteEnvironment(f.ctx, store.DeleteInput{ReferenceInput: in, Wait: wait})
	}

	if _, err := f.store.CommitReference(f.ctx, target(agentA, alice, binding)); err != nil {
		t.Fatal(err)
	}
	// Refusals change nothing.
	if _, err := f.store.ReserveSuccessor(f.ctx, store.ReserveSuccessorInput{Caller: agentA, OperationID: opID(), Owner: alice, Environment: r,
		SourceBindingID: binding, SuccessorBindingID: "conv-delete-next"}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		in   store.ReferenceInput
		want error
	}{
		{"another binding holds a reference", target(agentA, alice, binding), apierror.ErrNotReady},
		{"another owner", target(agentA, bob, binding), apierror.ErrNotFound},
		{"another client", target(agentB, alice, binding), apierror.ErrNotFound},
		{"a binding without a reference", target(agentA, alice, "conv-other"), apierror.ErrNotReady},
	} {
		before := f.snapshot(t, env.Name)
		if _, err := del(c.in, 0); !errors.Is(err, c.want) {
			t.Fatalf("%s: %v, want %v", c.name, err, c.want)
		}
		if string(f.snapshot(t, env.Name)) != string(before) {
			t.Fatalf("%s: the refused delete changed the environment", c.name)
		}
	}
	if _, err := f.store.AbortReference(f.ctx, target(agentA, alice, "conv-delete-next")); err != nil {
		t.Fatal(err)
	}

	// The owner's own run claim does not hold a delete up; every grant dies with it.
	gen := uint64(f.get(t, env.Name).Status.GrantGeneration)
	grant := authority.GrantClaims{BindingID: binding, Environment: r, GrantGeneration: gen}
	if _, err := f.store.AcquireRun(f.ctx, store.AcquireRunInput{Caller: agentA, OperationID: opID(), Environment: r, RunID: "run-1", Grant: grant}); err != nil {
		t.Fatal(err)
	}
	first := target(agentA, alice, binding)
	d, err := del(first, 0)
	if err != nil {
		t.Fatal(err)
	}
	st := d.Environment.Status
	if op := st.LifecycleOperation; op == nil || op.Kind != v1alpha1.LifecycleDelete || uint64(st.GrantGeneration) != gen+1 || st.ActiveRun != nil {
		t.Fatalf("delete answered operation %+v, generation %d (was %d), run %v", op, st.GrantGeneration, gen, st.ActiveRun)
	}
	if _, err := f.store.AcquireRun(f.ctx, store.AcquireRunInput{Caller: agentA, OperationID: opID(), Environment: r, RunID: "run-2", Grant: grant}); !errors.Is(err, apierror.ErrRevoked) && !errors.Is(err, apierror.ErrNotReady) {
		t.Fatalf("acquire with a grant from before the delete: %v", err)
	}
	if replay, err := del(first, 0); err != nil || replay.Environment.Status.LifecycleOperation.OperationID != first.OperationID {
		t.Fatalf("replay of the delete: %v", err)
	}

	// Waiting answers the tombstone; the claim and the Pod are gone from the API.
	done, err := del(target(agentA, alice, binding), store.MaxDeleteWait)
	if err != nil {
		t.Fatal(err)
	}
	if !done.Environment.Status.Deleted() {
		t.Fatalf("a delete that waited answered %+v", done.Environment.Status.LifecycleOperation)
	}
	tomb := f.get(t, env.Name)
	if len(tomb.Status.References) != 0 || tomb.Status.PVC != nil || tomb.Status.Pod != nil {
		t.Fatalf("tombstone keeps references %v, claim %v, pod %v", tomb.Status.References, tomb.Status.PVC, tomb.Status.Pod)
	}
	if _, err := f.c.Kube().CoreV1().PersistentVolumeClaims(f.ns).Get(f.ctx, env.Status.PVC.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the workspace claim after the delete: %v", err)
	}
	if _, err := f.c.Kube().CoreV1().Pods(f.ns).Get(f.ctx, env.Status.Pod.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the executor Pod after the delete: %v", err)
	}
	clustertest.Eventually(t, 30*time.Second, "the tombstone's finalizer released", func() bool {
		return len(f.get(t, env.Name).Finalizers) == 0
	})
	again, err := del(target(agentA, alice, binding), 0)
	if err != nil || !again.Environment.Status.Deleted() {
		t.Fatalf("a second delete: %v", err)
	}
	// Everything else answers as for an absent environment.
	if _, err := f.store.Attach(f.ctx, store.AttachInput{Caller: agentA, Owner: alice, Environment: r, BindingID: binding}); !errors.Is(err, apierror.ErrNotFound) {
		t.Fatalf("attach to a deleted environment: %v", err)
	}
	if _, err := del(target(agentA, bob, binding), 0); !errors.Is(err, apierror.ErrNotFound) {
		t.Fatalf("another owner's delete of the tombstone: %v", err)
	}
	if _, err := f.store.DeleteRetiredEnvironment(f.ctx, store.AdminInput{Caller: admin, OperationID: opID(), Environment: r, Preconditions: store.Preconditions{PVCUID: ptrTo(string(env.Status.PVC.UID))}}); !errors.Is(err, apierror.ErrNotFound) {
		t.Fatalf("an administrator's delete of the tombstone: %v", err)
	}

	// The binding's next Ensure replaces the tombstone with a new environment.
	next := f.waitReady(t, f.ensure(t, agentA, alice, binding).Environment.Name)
	if next.UID == env.UID || next.Name != env.Name {
		t.Fatalf("Ensure after the delete: %s/%s, was %s/%s", next.Name, next.UID, env.Name, env.UID)
	}
}

// A profile's suspendedTTL deletes a suspended environment once, by the controller, unless
// its owner retains it; the tombstone goes after the retention.
func TestSuspendedTTL(t *testing.T) {
	f := newFixture(t, options{reconcile: true, tombstoneRetention: 3 * time.Second, profileExtra: "    suspendedTTL: 4s\n"})
	suspend := func(binding string, retain bool) *v1alpha1.ExecutionEnvironment {
		env := f.waitReady(t, f.ensure(t, agentA, alice, binding).Environment.Name)
		in := func() store.ReferenceInput {
			return store.ReferenceInput{Caller: agentA, OperationID: opID(), Owner: alice, Environment: ident.EnvironmentRef{Name: env.Name, UID: string(env.UID)}, BindingID: binding}
		}
		if retain {
			if r, err := f.store.SetRetention(f.ctx, store.RetentionInput{ReferenceInput: in(), Retain: true}); err != nil || !r.Environment.Status.Retained() {
				t.Fatalf("retain: %v", err)
			}
		}
		if _, err := f.store.SuspendEnvironment(f.ctx, in()); err != nil {
			t.Fatal(err)
		}
		return env
	}
	kept := suspend("conv-kept", true)
	gone := suspend("conv-gone", false)
	var tomb *v1alpha1.ExecutionEnvironment
	clustertest.Eventually(t, time.Minute, "the unretained environment deleted", func() bool {
		tomb = f.get(t, gone.Name)
		return tomb.Status.Deleted()
	})
	if op := tomb.Status.LifecycleOperation; op.OperationID != "expired-suspendedTTL" {
		t.Fatalf("deleted by %+v", op)
	}
	// kept was suspended before gone, so its TTL has passed too.
	if st := f.get(t, kept.Name).Status; !st.Suspended() || st.PVC == nil {
		t.Fatalf("the retained environment: %+v", st.LifecycleOperation)
	}
	clustertest.Eventually(t, 30*time.Second, "the tombstone removed after its retention", func() bool {
		_, err := f.exec.ExecutionV1alpha1().ExecutionEnvironments(f.ns).Get(f.ctx, gone.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}
