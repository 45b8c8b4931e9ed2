package usage

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/generated/clientset/versioned/fake"
	execlisters "github.com/execplane/execplane/pkg/generated/listers/execution/v1alpha1"
)

const testNS = "executors"

// testRecorder is a Recorder over a fake clientset and hand-filled caches (the cluster
// tests prove the wiring; these the decisions).
func testRecorder(t *testing.T, now *time.Time, envs ...*executionv1alpha1.ExecutionEnvironment) (*Recorder, *fake.Clientset) {
	t.Helper()
	envIdx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, e := range envs {
		if err := envIdx.Add(e); err != nil {
			t.Fatal(err)
		}
	}
	cs := fake.NewSimpleClientset()
	r, err := NewRecorder(RecorderConfig{
		Execution: cs, Namespace: testNS, Environments: execlisters.NewExecutionEnvironmentLister(envIdx),
		Pods:   corelisters.NewPodLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})),
		Claims: corelisters.NewPersistentVolumeClaimLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})),
		Now:    func() time.Time { return *now },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	r.start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), r.synced...) {
		t.Fatal("cache not synced")
	}
	return r, cs
}

func testEnv(name string, uid types.UID, created time.Time) *executionv1alpha1.ExecutionEnvironment {
	return &executionv1alpha1.ExecutionEnvironment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS, UID: uid, CreationTimestamp: metav1.NewTime(created)},
		Spec:       executionv1alpha1.ExecutionEnvironmentSpec{OwnerHash: "o", ClientHash: "c", BindingID: "b", Profile: "p"},
		Status: executionv1alpha1.ExecutionEnvironmentStatus{Conditions: []metav1.Condition{{
			Type: executionv1alpha1.ConditionReady, Status: metav1.ConditionTrue, LastTransitionTime: metav1.NewTime(created.Add(time.Second)),
		}}},
	}
}

// A gateway's report is in the view at once, in the written ledger after a checkpoint, and
// counts once however often it is sent.
func TestRecorderReportViewCheckpoint(t *testing.T) {
	now := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	env := testEnv("xenv-a", "uid-a", now)
	r, cs := testRecorder(t, &now, env)
	now = now.Add(10 * time.Second)
	rep := SeriesReport{ID: "gw-1", Commands: 2, BytesIn: 100, At: now}
	if err := r.Report(env.Name, env.UID, rep); err != nil {
		t.Fatal(err)
	}
	if err := r.Report(env.Name, "uid-other", rep); err == nil {
		t.Fatal("a report of another incarnation was taken")
	}
	u, err := r.Lookup(env.Name, "")
	if err != nil || u == nil {
		t.Fatalf("lookup: %v %v", u, err)
	}
	if v := r.View(u, now); v.Status.Totals.Commands != 2 || v.Status.Totals.BytesIn != 100 {
		t.Fatalf("view before a checkpoint: %+v", v.Status.Totals)
	}
	r.Checkpoint(t.Context())
	written, err := cs.ExecutionV1alpha1().ExecutionUsages(testNS).Get(t.Context(), LedgerName(env.Name, env.UID), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if written.Status.Totals.Commands != 2 || written.Status.Accrual.State != executionv1alpha1.UsageReady {
		t.Fatalf("written: %+v", written.Status)
	}
	if want := int64(9000); written.Status.Totals.ReadyMilliseconds != want {
		t.Errorf("ready %d ms, want %d (ready a second after creation)", written.Status.Totals.ReadyMilliseconds, want)
	}
}

// A snapshot's storage has a ledger of its own: storage alone accrues, from its creation
// until it is seen gone; its environment's lookups never take it, and its records name it.
func TestRecorderSnapshotLedger(t *testing.T) {
	start := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	now := start
	r, cs := testRecorder(t, &now)
	sn := &executionv1alpha1.ExecutionSnapshot{
		ObjectMeta: metav1.ObjectMeta{Name: "xsnap-1", Namespace: testNS, UID: "uid-s", CreationTimestamp: metav1.NewTime(start)},
		Spec: executionv1alpha1.ExecutionSnapshotSpec{ClientHash: "c", OwnerHash: "o", Name: "before-refactor",
			Source:  executionv1alpha1.SnapshotSource{Environment: "xenv-a", UID: "uid-a", BindingID: "b", Profile: "p"},
			Storage: executionv1alpha1.SnapshotStorage{Name: "xsnap-k-1", Bytes: 1 << 30}},
		Status: executionv1alpha1.ExecutionSnapshotStatus{Phase: executionv1alpha1.SnapshotReady},
	}
	if _, err := cs.ExecutionV1alpha1().ExecutionSnapshots(testNS).Create(t.Context(), sn, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { _, err := r.snaps.ExecutionSnapshots(testNS).Get(sn.Name); return err == nil })
	now = start.Add(time.Minute)
	r.Checkpoint(t.Context())
	name := LedgerName(sn.Name, sn.UID)
	u, err := cs.ExecutionV1alpha1().ExecutionUsages(testNS).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if u.Spec.Snapshot == nil || u.Spec.Snapshot.Name != "before-refactor" || u.Spec.Environment.Name != "xenv-a" ||
		u.Status.Accrual.State != executionv1alpha1.UsageOther || u.Status.Accrual.StorageBytes != 1<<30 {
		t.Fatalf("the snapshot's ledger: %+v %+v", u.Spec, u.Status.Accrual)
	}
	if want := int64(1<<20) * 60; u.Status.Totals.StorageKiBSeconds != want {
		t.Errorf("storage %d KiB·s after a minute, want %d", u.Status.Totals.StorageKiBSeconds, want)
	}
	waitFor(t, func() bool { _, err := r.usages.ExecutionUsages(testNS).Get(name); return err == nil })
	if got, err := r.Lookup("xenv-a", ""); err != nil || got != nil {
		t.Errorf("the source environment's lookup took the snapshot's ledger: %v %v", got, err)
	}
	if _, rec := groupKey(u, 0); rec.GetSnapshot() != "before-refactor" || rec.GetEnvironment().GetId() != "xenv-a" {
		t.Errorf("the snapshot's record: %v", rec)
	}

	if err := cs.ExecutionV1alpha1().ExecutionSnapshots(testNS).Delete(t.Context(), sn.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { _, err := r.snaps.ExecutionSnapshots(testNS).Get(sn.Name); return err != nil })
	now = start.Add(2 * time.Minute)
	r.Checkpoint(t.Context())
	u, err = cs.ExecutionV1alpha1().ExecutionUsages(testNS).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if u.Status.EndedAt == nil || u.Status.Accrual.State != executionv1alpha1.UsageEnded {
		t.Fatalf("a deleted snapshot's ledger did not end: %+v", u.Status)
	}
	if want := int64(1<<20) * 120; u.Status.Totals.StorageKiBSeconds != want {
		t.Errorf("storage %d KiB·s at the end, want %d", u.Status.Totals.StorageKiBSeconds, want)
	}
}

// waitFor polls cond (a cache catching up) for at most 5 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.After(5 * time.Second)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatal("the cache did not catch up")
		}
	}
}
