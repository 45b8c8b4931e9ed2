package allocation

import (
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/store"
)

// testSnapshot is a snapshot of alice's holding a GiB, in phase.
func testSnapshot(name string, phase executionv1alpha1.SnapshotPhase) *executionv1alpha1.ExecutionSnapshot {
	return &executionv1alpha1.ExecutionSnapshot{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS, UID: types.UID("uid-" + name),
			Labels: map[string]string{store.SnapshotOwnerKeyLabel: "k1"}},
		Spec: executionv1alpha1.ExecutionSnapshotSpec{ClientHash: testClient, OwnerHash: alice,
			Storage: executionv1alpha1.SnapshotStorage{Name: storageOf(name), Bytes: 1 << 30}},
		Status: executionv1alpha1.ExecutionSnapshotStatus{Phase: phase},
	}
}

// storageOf is the test snapshot's storage name: what allocations list.
func storageOf(name string) string { return "xsnap-k1-" + name }

// snapshots lists the snapshots (their storage) an allocation holds.
func (f *fixture) snapshots(s scope) []string {
	f.t.Helper()
	var out []string
	if al := f.allocation(s); al != nil {
		for _, sn := range al.Status.Snapshots {
			out = append(out, sn.Name)
		}
	}
	return out
}

// waitSnapshots waits until the Allocator's snapshot cache holds n snapshots in phase.
func (f *fixture) waitSnapshots(n int, phase executionv1alpha1.SnapshotPhase) {
	f.t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.After(5 * time.Second)
	for {
		list, _ := f.a.snaps.ExecutionSnapshots(testNS).List(labels.Everything())
		got := 0
		for _, sn := range list {
			if sn.Status.Phase == phase {
				got++
			}
		}
		if got == n {
			return
		}
		select {
		case <-tick.C:
		case <-deadline:
			f.t.Fatalf("the snapshots cache holds %d in %s, want %d", got, phase, n)
		}
	}
}

// A snapshot's storage counts against the storage quota with the environments': admitted
// while it fits, refused beyond (and then an environment is refused for it), listed by the
// sync when admission did not see it, given back once it is gone or failed.
func TestSnapshotStorage(t *testing.T) {
	gi := int64(1 << 30)
	f := newFixture(t, setup{quotas: "defaults: {owner: {storage: 3Gi}}",
		envs: []*executionv1alpha1.ExecutionEnvironment{testEnv("xenv-a", alice, running), testEnv("xenv-b", alice, running)}})
	ctx := t.Context()
	for _, name := range []string{"xenv-a", "xenv-b"} {
		if err := f.a.AdmitEnvironment(ctx, admitted(alice, name)); err != nil {
			t.Fatal(err)
		}
		f.settle()
	}
	if err := f.a.AdmitSnapshot(ctx, admitted(alice, storageOf("1"))); err != nil {
		t.Fatalf("a snapshot within the quota: %v", err)
	}
	f.settle()
	if err := f.a.AdmitSnapshot(ctx, admitted(alice, storageOf("1"))); err != nil {
		t.Errorf("the same snapshot again: %v", err)
	}
	want := map[string]string{"quota": "storage", "scope": "owner", "limit": strconv.FormatInt(3*gi, 10), "used": strconv.FormatInt(3*gi, 10)}
	if diff := cmp.Diff(want, refusal(t, f.a.AdmitSnapshot(ctx, admitted(alice, storageOf("2"))))); diff != "" {
		t.Errorf("a snapshot beyond the quota (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, refusal(t, f.a.AdmitEnvironment(ctx, admitted(alice, "xenv-c")))); diff != "" {
		t.Errorf("an environment beyond the quota the snapshot holds (-want +got):\n%s", diff)
	}
	if got := f.snapshots(ownerScope(alice)); !cmp.Equal(got, []string{storageOf("1")}) {
		t.Errorf("the owner's snapshots = %v", got)
	}

	// The sync keeps a fresh admission, keeps a snapshot that exists, lists one admission
	// never saw, and drops what is gone or failed once past the grace.
	if _, err := f.api.ExecutionV1alpha1().ExecutionSnapshots(testNS).Create(ctx, testSnapshot("0", executionv1alpha1.SnapshotReady), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitSnapshots(1, executionv1alpha1.SnapshotReady)
	f.a.Sync(ctx)
	if got := f.snapshots(ownerScope(alice)); !cmp.Equal(got, []string{storageOf("0"), storageOf("1")}) {
		t.Errorf("after a sync within the grace: %v", got)
	}
	f.now = t0.Add(grace + time.Second)
	f.settle()
	f.a.Sync(ctx)
	if got := f.snapshots(ownerScope(alice)); !cmp.Equal(got, []string{storageOf("0")}) {
		t.Errorf("after a sync past the grace (xsnap-1 never created): %v", got)
	}
	failed := testSnapshot("0", executionv1alpha1.SnapshotFailed)
	if _, err := f.api.ExecutionV1alpha1().ExecutionSnapshots(testNS).Update(ctx, failed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitSnapshots(1, executionv1alpha1.SnapshotFailed)
	f.now = f.now.Add(grace + time.Second)
	f.settle()
	f.a.Sync(ctx)
	if got := f.snapshots(ownerScope(alice)); len(got) != 0 {
		t.Errorf("a failed snapshot still counted: %v", got)
	}
	f.settle()
	if err := f.a.AdmitSnapshot(ctx, admitted(alice, storageOf("2"))); err != nil {
		t.Errorf("a snapshot once the storage was given back: %v", err)
	}
}
