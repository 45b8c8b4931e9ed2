package v1alpha1_test

import (
	"strings"
	"testing"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
)

// fullSnapshot sets every spec and status field of a snapshot (TestFixtureSetsEveryField).
func fullSnapshot(name string) *v1alpha1.ExecutionSnapshot {
	return &v1alpha1.ExecutionSnapshot{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.ExecutionSnapshotSpec{
			ClientHash: hex64, OwnerHash: hex64, OwnerKey: hex64[:16], Name: "before-refactor", OperationID: "op-1",
			Source: v1alpha1.SnapshotSource{Environment: "xenv-0a1b", UID: "env-uid", BindingID: "conversation:42", Profile: "python", Epoch: 3, PodUID: "pod-uid"},
			Method: v1alpha1.SnapshotCopy,
			Storage: v1alpha1.SnapshotStorage{Name: "xsnap-" + hex64[:16] + "-0a1b", SourceClaim: "xenv-0a1b-workspace", StorageClass: "standard",
				VolumeSnapshotClass: "csi-hostpath-snapclass", Bytes: 1 << 30},
		},
		Status: v1alpha1.ExecutionSnapshotStatus{
			Phase: v1alpha1.SnapshotReady, CutBy: ptr.To(now), CutAt: ptr.To(now), ReadyAt: ptr.To(now), RestoreBytes: 1 << 30,
			Commands: []v1alpha1.SnapshotCommand{{ID: "cmd-1", State: "EXITED", ExitCode: ptr.To[int32](3)}},
			Copy:     &v1alpha1.CopyProgress{Attempts: 1, Entries: 1000, Bytes: 1 << 20},
			Failure:  &v1alpha1.SnapshotFailure{Reason: "DEADLINE_EXCEEDED", Message: "the copy outlasted the quiesce"},
		},
	}
}

// A snapshot's every field round-trips; its spec is immutable; bad values are refused.
func TestSnapshotRoundTripsAndRefuses(t *testing.T) {
	cs, ns, ctx := client(t)
	snaps := cs.ExecutionV1alpha1().ExecutionSnapshots(ns)
	want := fullSnapshot("xsnap-roundtrip")
	created, err := snaps.Create(ctx, want, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !apiequality.Semantic.DeepEqual(created.Status, v1alpha1.ExecutionSnapshotStatus{}) {
		t.Fatal("status was accepted on create: the status subresource is not in effect")
	}
	created.Status = want.Status
	if _, err := snaps.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := snaps.Get(ctx, want.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !apiequality.Semantic.DeepEqual(got.Spec, want.Spec) || !apiequality.Semantic.DeepEqual(got.Status, want.Status) {
		t.Fatalf("changed:\n got %+v\nwant %+v", got, want)
	}
	got.Spec.Source.Environment = "xenv-other"
	if _, err := snaps.Update(ctx, got, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec is immutable") {
		t.Fatalf("spec change: want Invalid (spec is immutable), got %v", err)
	}
	for name, mutate := range map[string]func(*v1alpha1.ExecutionSnapshot){
		"name not a label":   func(s *v1alpha1.ExecutionSnapshot) { s.Spec.Name = "Not_A_Label" },
		"owner key long":     func(s *v1alpha1.ExecutionSnapshot) { s.Spec.OwnerKey = hex64[:17] },
		"unknown method":     func(s *v1alpha1.ExecutionSnapshot) { s.Spec.Method = "Rsync" },
		"no storage bytes":   func(s *v1alpha1.ExecutionSnapshot) { s.Spec.Storage.Bytes = 0 },
		"operation too long": func(s *v1alpha1.ExecutionSnapshot) { s.Spec.OperationID = strings.Repeat("o", 129) },
	} {
		s := fullSnapshot("xsnap-bad-" + strings.ReplaceAll(name, " ", "-"))
		mutate(s)
		if _, err := snaps.Create(ctx, s, metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
			t.Errorf("%s: want Invalid, got %v", name, err)
		}
	}
	for name, mutate := range map[string]func(*v1alpha1.ExecutionSnapshotStatus){
		"unknown phase": func(s *v1alpha1.ExecutionSnapshotStatus) { s.Phase = "Half" },
		"65 commands": func(s *v1alpha1.ExecutionSnapshotStatus) {
			for len(s.Commands) <= v1alpha1.MaxSnapshotCommands {
				s.Commands = append(s.Commands, s.Commands[0])
			}
		},
	} {
		cur, err := snaps.Get(ctx, want.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		mutate(&cur.Status)
		if _, err := snaps.UpdateStatus(ctx, cur, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
			t.Errorf("%s: want Invalid, got %v", name, err)
		}
	}
}
