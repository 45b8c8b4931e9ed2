package store_test

import (
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/pkg/apierror"
	v1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/store"
)

// A snapshot's life in the store: begun for the owner of a binding's reference (the
// source's incarnation, epoch and executor recorded), idempotent by name and operation id,
// the name taken for any other request; another owner's or client's answers NOT_FOUND like
// an absent one; cut once (fenced by the executor it began on: a suspended source's is
// cut unquiesced, a running one's only quiesced); listed by owner; deleted (held by the
// storage finalizer until the controller removes the storage).
func TestSnapshotTransitions(t *testing.T) {
	f := newFixture(t, options{reconcile: true})
	const binding = "conv-snap"
	env := f.waitReady(t, f.ensure(t, agentA, alice, binding).Environment.Name)
	in := func(op, name string) store.SnapshotInput {
		return store.SnapshotInput{ReferenceInput: store.ReferenceInput{Caller: agentA, OperationID: op, Owner: alice, Environment: ref(env), BindingID: binding}, Name: name}
	}
	snap, err := f.store.BeginSnapshot(f.ctx, in("op-snap-1", "before"))
	if err != nil {
		t.Fatal(err)
	}
	src := snap.Spec.Source
	if src.Environment != env.Name || src.UID != string(env.UID) || src.PodUID != string(env.Status.Pod.UID) || src.Epoch != env.Status.Epoch ||
		snap.Spec.Method != v1alpha1.SnapshotCopy || snap.Spec.Storage.SourceClaim != env.Status.PVC.Name || snap.Spec.Storage.Bytes <= 0 ||
		snap.Status.Phase != "" || len(snap.Finalizers) != 1 {
		t.Fatalf("the snapshot begun: %+v", snap)
	}
	if again, err := f.store.BeginSnapshot(f.ctx, in("op-snap-1", "before")); err != nil || again.UID != snap.UID {
		t.Fatalf("the same request again: %v %v", again, err)
	}
	if _, err := f.store.BeginSnapshot(f.ctx, in("op-snap-2", "before")); !errors.Is(err, apierror.ErrAlreadyExists) {
		t.Fatalf("the name from another request: %v", err)
	}
	other := store.SnapshotInput{ReferenceInput: store.ReferenceInput{Caller: agentA, OperationID: "op-x", Owner: bob, Environment: ref(env), BindingID: binding}, Name: "before"}
	if _, err := f.store.BeginSnapshot(f.ctx, other); !errors.Is(err, apierror.ErrNotFound) {
		t.Fatalf("another owner's snapshot of the environment: %v", err)
	}
	for who, target := range map[string]store.SnapshotTarget{
		"another owner":  {Caller: agentA, Owner: bob, Name: "before"},
		"another client": {Caller: agentB, Owner: alice, Name: "before"},
		"absent":         {Caller: agentA, Owner: alice, Name: "never"},
	} {
		if _, err := f.store.GetSnapshot(f.ctx, target); !errors.Is(err, apierror.ErrNotFound) {
			t.Errorf("%s: %v", who, err)
		}
		if _, err := f.store.DeleteSnapshot(f.ctx, target); !errors.Is(err, apierror.ErrNotFound) {
			t.Errorf("%s's delete: %v", who, err)
		}
	}
	if _, err := f.store.GetSnapshot(f.ctx, store.SnapshotTarget{Caller: noAttest, Owner: alice, Name: "before"}); !errors.Is(err, apierror.ErrPermissionDenied) {
		t.Fatalf("a client that may not attest owners: %v", err)
	}

	mine := store.SnapshotTarget{Caller: agentA, Owner: alice, Name: "before"}
	if _, err := f.store.CutSnapshot(f.ctx, mine, false, nil, time.Now().Add(time.Minute)); !errors.Is(err, apierror.ErrInvalidArgument) {
		t.Fatalf("a running source cut unquiesced: %v", err)
	}
	cmds := []v1alpha1.SnapshotCommand{{ID: "cmd-1", State: "RUNNING"}}
	cut, err := f.store.CutSnapshot(f.ctx, mine, true, cmds, time.Now().Add(time.Minute))
	if err != nil || cut.Status.Phase != v1alpha1.SnapshotCutting || cut.Status.CutBy == nil || len(cut.Status.Commands) != 1 {
		t.Fatalf("cut: %+v %v", cut, err)
	}
	if again, err := f.store.CutSnapshot(f.ctx, mine, true, nil, time.Now()); err != nil || len(again.Status.Commands) != 1 || !again.Status.CutBy.Equal(cut.Status.CutBy) {
		t.Fatalf("a cut repeated changed it: %+v %v", again, err)
	}

	// One cut at a time per source: another snapshot of it meanwhile is NOT_READY.
	if _, err := f.store.BeginSnapshot(f.ctx, in("op-snap-3", "stale")); !errors.Is(err, apierror.ErrNotReady) {
		t.Fatalf("a second snapshot while one is cut: %v", err)
	}
	// The controller's outcome (not running here): the first one done.
	cut.Status.Phase = v1alpha1.SnapshotReady
	if _, err := f.exec.ExecutionV1alpha1().ExecutionSnapshots(f.ns).UpdateStatus(f.ctx, cut, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A snapshot begun on the running executor cannot be cut once the source was suspended.
	stale, err := f.store.BeginSnapshot(f.ctx, in("op-snap-3", "stale"))
	if err != nil {
		t.Fatal(err)
	}
	ref := store.ReferenceInput{Caller: agentA, OperationID: opID(), Owner: alice, Environment: ref(env), BindingID: binding}
	if _, err := f.store.SuspendEnvironment(f.ctx, ref); err != nil {
		t.Fatal(err)
	}
	waitFor(t, f, env.Name, func(e *v1alpha1.ExecutionEnvironment) bool { return e.Status.Suspended() })
	if _, err := f.store.CutSnapshot(f.ctx, store.SnapshotTarget{Caller: agentA, Owner: alice, Name: stale.Spec.Name}, true, nil, time.Now().Add(time.Minute)); !errors.Is(err, apierror.ErrStaleEpoch) {
		t.Fatalf("a cut after the executor changed: %v", err)
	}
	// Suspended: begun and cut without an executor to quiesce (the stale one failed first,
	// as the controller fails a snapshot never cut).
	staleSnap, err := f.exec.ExecutionV1alpha1().ExecutionSnapshots(f.ns).Get(f.ctx, stale.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	staleSnap.Status.Phase = v1alpha1.SnapshotFailed
	if _, err := f.exec.ExecutionV1alpha1().ExecutionSnapshots(f.ns).UpdateStatus(f.ctx, staleSnap, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	idle, err := f.store.BeginSnapshot(f.ctx, in("op-snap-4", "idle"))
	if err != nil || idle.Spec.Source.PodUID != "" {
		t.Fatalf("a snapshot of a suspended source: %+v %v", idle, err)
	}
	if c, err := f.store.CutSnapshot(f.ctx, store.SnapshotTarget{Caller: agentA, Owner: alice, Name: "idle"}, false, nil, time.Now().Add(time.Minute)); err != nil || c.Status.Phase != v1alpha1.SnapshotCutting {
		t.Fatalf("cut of a suspended source: %v", err)
	}

	list, err := f.store.ListSnapshots(f.ctx, agentA, alice)
	if err != nil || len(list) != 3 || list[0].Spec.Name != "before" || list[1].Spec.Name != "idle" || list[2].Spec.Name != "stale" {
		t.Fatalf("the owner's list: %v %v", names(list), err)
	}
	if list, err := f.store.ListSnapshots(f.ctx, agentA, bob); err != nil || len(list) != 0 {
		t.Fatalf("another owner's list: %v %v", names(list), err)
	}
	deleted, err := f.store.DeleteSnapshot(f.ctx, mine)
	if err != nil || deleted.DeletionTimestamp == nil {
		t.Fatalf("delete: %+v %v", deleted, err)
	}
	if again, err := f.store.DeleteSnapshot(f.ctx, mine); err != nil || again.DeletionTimestamp == nil {
		t.Fatalf("delete again: %v", err)
	}
	if _, err := f.store.BeginSnapshot(f.ctx, in("op-snap-1", "before")); !errors.Is(err, apierror.ErrNotReady) {
		t.Fatalf("the name of a snapshot being deleted: %v", err)
	}
	if got, err := f.exec.ExecutionV1alpha1().ExecutionSnapshots(f.ns).Get(f.ctx, deleted.Name, metav1.GetOptions{}); err != nil || got.DeletionTimestamp == nil {
		t.Fatalf("the finalizer does not hold the snapshot: %v", err)
	}
}

func names(list []*v1alpha1.ExecutionSnapshot) []string {
	var out []string
	for _, s := range list {
		out = append(out, s.Spec.Name)
	}
	return out
}

func waitFor(t *testing.T, f *fixture, name string, cond func(*v1alpha1.ExecutionEnvironment) bool) {
	t.Helper()
	clustertest.Eventually(t, time.Minute, name, func() bool { return cond(f.get(t, name)) })
}
