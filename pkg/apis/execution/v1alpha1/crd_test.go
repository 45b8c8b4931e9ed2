package v1alpha1_test

import (
	"context"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	v1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/generated/clientset/versioned"
)

const crdDir = "../../../../deploy/helm/execplane/files/crds"

func TestMain(m *testing.M) { os.Exit(clustertest.Main(m, clustertest.Options{})) }

func client(t *testing.T) (*versioned.Clientset, string, context.Context) {
	t.Helper()
	c := clustertest.Cluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	if _, err := c.InstallCRDs(ctx, crdDir); err != nil {
		t.Fatal(err)
	}
	cs, err := versioned.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	return cs, clustertest.Namespace(t), ctx
}

var hex64 = strings.Repeat("ab", 32)

// now is second-precision: metav1.Time serialises to RFC 3339 seconds.
var now = metav1.NewTime(time.Now().UTC().Truncate(time.Second))

// full sets every spec and status field to a non-zero value; TestFixtureSetsEveryField keeps
// it that way as the types grow, so the round trip below covers every field.
func full(name string) *v1alpha1.ExecutionEnvironment {
	return &v1alpha1.ExecutionEnvironment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.ExecutionEnvironmentSpec{
			SchemaVersion: 1, OwnerHash: hex64, ClientHash: hex64, BindingID: "conversation:42",
			RequestFingerprint: hex64, Profile: "python", ProfileDigest: "sha256:" + hex64,
			CallerMetadata: map[string]string{"team": "a"},
			From:           &v1alpha1.WorkspaceSource{Snapshot: "xsnap-0a1b", SnapshotUID: "snap-uid"},
		},
		Status: v1alpha1.ExecutionEnvironmentStatus{
			ObservedGeneration: 1, Phase: v1alpha1.PhaseReady, Epoch: 7, GrantGeneration: 2,
			FenceState: v1alpha1.FenceUnknown, FenceReason: "executor vanished",
			References: []v1alpha1.Reference{
				{BindingID: "conversation:42", State: v1alpha1.ReferencePublished, SourceBindingID: "conversation:41", OperationID: "op-1", UpdatedAt: now},
				{BindingID: "conversation:43", State: v1alpha1.ReferenceReserveSuccessor, SourceBindingID: "conversation:42", OperationID: "op-2", UpdatedAt: now},
			},
			ActiveRun:         &v1alpha1.RunClaim{BindingID: "conversation:42", RunID: "run-1", ClaimID: "claim-1", Epoch: 7, GrantGeneration: 2, ClientHash: hex64, AcquiredAt: now, ExpiresAt: now},
			LastRunActivityAt: ptr.To(now),
			LifecycleOperation: &v1alpha1.LifecycleOperation{
				Kind: v1alpha1.LifecycleReplace, Phase: v1alpha1.PhaseAwaitingTermination, OperationID: "op-3",
				ExpectedPodUID: "pod-uid", ExpectedPVCUID: "pvc-uid", Reason: "image update", StartedAt: now, CompletedAt: ptr.To(now),
			},
			Retention:          &v1alpha1.Retention{Retain: true, BindingID: "conversation:42", OperationID: "op-4", UpdatedAt: now},
			Deadline:           &v1alpha1.Deadline{At: now, Action: v1alpha1.DeadlineSuspend, BindingID: "conversation:42", OperationID: "op-5", UpdatedAt: now},
			TerminationProof:   &v1alpha1.TerminationProof{PodName: "p", PodUID: "pod-uid", PodPhase: "Failed", ExitCode: ptr.To[int32](137), Reason: "OOMKilled", ObservedAt: now},
			AuthorityChangedAt: ptr.To(metav1.NewMicroTime(now.Time.Add(123456 * time.Microsecond))),
			LastReplacement:    &v1alpha1.Replacement{OldPodUID: "old", NewPodUID: "new", Epoch: 6, CompletedAt: now},
			Pod:                &v1alpha1.ObjectIdentity{Name: "p", UID: "pod-uid"},
			PVC:                &v1alpha1.ObjectIdentity{Name: "w", UID: "pvc-uid"},
			Receipts:           []v1alpha1.Receipt{{OperationID: "op-1", Operation: "AcquireRun", ArgumentsHash: hex64, Epoch: 7, GrantGeneration: 2, ClaimID: "claim-1", Created: true, RecordedAt: now}},
			Conditions:         []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, ObservedGeneration: 1, LastTransitionTime: now, Reason: "ExecutorReady", Message: "ready"}},
		},
	}
}

// TestFixtureSetsEveryField fails when a field is added to the types without being set in
// full() or fullSnapshot(), which would let the round trips silently skip it.
func TestFixtureSetsEveryField(t *testing.T) {
	env := full("x")
	everyFieldSet(t, "spec", reflect.ValueOf(env.Spec))
	everyFieldSet(t, "status", reflect.ValueOf(env.Status))
	snap := fullSnapshot("x")
	everyFieldSet(t, "snapshot spec", reflect.ValueOf(snap.Spec))
	everyFieldSet(t, "snapshot status", reflect.ValueOf(snap.Status))
}

func everyFieldSet(t *testing.T, path string, v reflect.Value) {
	t.Helper()
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			t.Errorf("%s is nil", path)
			return
		}
		everyFieldSet(t, path, v.Elem())
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(metav1.Time{}) {
			if tm := v.Interface().(metav1.Time); tm.IsZero() {
				t.Errorf("%s is zero", path)
			}
			return
		}
		if v.Type() == reflect.TypeOf(metav1.MicroTime{}) {
			if tm := v.Interface().(metav1.MicroTime); tm.IsZero() {
				t.Errorf("%s is zero", path)
			}
			return
		}
		for i := range v.NumField() {
			everyFieldSet(t, path+"."+v.Type().Field(i).Name, v.Field(i))
		}
	case reflect.Slice:
		if v.Len() == 0 {
			t.Errorf("%s is empty", path)
		}
		for i := range v.Len() {
			everyFieldSet(t, path, v.Index(i))
		}
	default:
		if v.IsZero() {
			t.Errorf("%s is zero", path)
		}
	}
}

// Every spec and status field round-trips through the API server: nothing is pruned.
func TestEveryFieldRoundTrips(t *testing.T) {
	cs, ns, ctx := client(t)
	want := full("roundtrip")
	created, err := cs.ExecutionV1alpha1().ExecutionEnvironments(ns).Create(ctx, want, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !apiequality.Semantic.DeepEqual(created.Status, v1alpha1.ExecutionEnvironmentStatus{}) {
		t.Fatal("status was accepted on create: the status subresource is not in effect")
	}
	created.Status = want.Status
	if _, err := cs.ExecutionV1alpha1().ExecutionEnvironments(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := cs.ExecutionV1alpha1().ExecutionEnvironments(ns).Get(ctx, "roundtrip", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !apiequality.Semantic.DeepEqual(got.Spec, want.Spec) {
		t.Errorf("spec changed:\n got %+v\nwant %+v", got.Spec, want.Spec)
	}
	if !apiequality.Semantic.DeepEqual(got.Status, want.Status) {
		t.Errorf("status changed:\n got %+v\nwant %+v", got.Status, want.Status)
	}
}

func TestSpecIsImmutable(t *testing.T) {
	cs, ns, ctx := client(t)
	env, err := cs.ExecutionV1alpha1().ExecutionEnvironments(ns).Create(ctx, full("immutable"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	env.Spec.Profile = "other"
	_, err = cs.ExecutionV1alpha1().ExecutionEnvironments(ns).Update(ctx, env, metav1.UpdateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec is immutable") {
		t.Fatalf("spec change: want Invalid (spec is immutable), got %v", err)
	}
	// Metadata stays writable (labels, finalizers).
	env.Spec.Profile = "python"
	env.Labels = map[string]string{"team": "a"}
	if _, err := cs.ExecutionV1alpha1().ExecutionEnvironments(ns).Update(ctx, env, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("metadata update refused: %v", err)
	}
}

func TestSchemaViolationsAreRefused(t *testing.T) {
	cs, ns, ctx := client(t)
	specCases := map[string]func(*v1alpha1.ExecutionEnvironment){
		"owner hash not hex":    func(e *v1alpha1.ExecutionEnvironment) { e.Spec.OwnerHash = "nothex" },
		"binding too long":      func(e *v1alpha1.ExecutionEnvironment) { e.Spec.BindingID = strings.Repeat("b", 129) },
		"profile not a label":   func(e *v1alpha1.ExecutionEnvironment) { e.Spec.Profile = "Python_3" },
		"digest without prefix": func(e *v1alpha1.ExecutionEnvironment) { e.Spec.ProfileDigest = hex64 },
		"schema version zero":   func(e *v1alpha1.ExecutionEnvironment) { e.Spec.SchemaVersion = 0 },
	}
	for name, mutate := range specCases {
		t.Run(name, func(t *testing.T) {
			env := full("bad-" + strings.ReplaceAll(name, " ", "-"))
			mutate(env)
			_, err := cs.ExecutionV1alpha1().ExecutionEnvironments(ns).Create(ctx, env, metav1.CreateOptions{})
			if !apierrors.IsInvalid(err) {
				t.Fatalf("want Invalid, got %v", err)
			}
		})
	}
	base, err := cs.ExecutionV1alpha1().ExecutionEnvironments(ns).Create(ctx, full("status-checks"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	statusCases := map[string]func(*v1alpha1.ExecutionEnvironmentStatus){
		"unknown fence state":   func(s *v1alpha1.ExecutionEnvironmentStatus) { s.FenceState = "Maybe" },
		"unknown reference":     func(s *v1alpha1.ExecutionEnvironmentStatus) { s.References[0].State = "Gone" },
		"negative epoch":        func(s *v1alpha1.ExecutionEnvironmentStatus) { s.Epoch = -1 },
		"duplicate binding key": func(s *v1alpha1.ExecutionEnvironmentStatus) { s.References[1].BindingID = s.References[0].BindingID },
		"65 references": func(s *v1alpha1.ExecutionEnvironmentStatus) {
			s.References = nil
			for i := range v1alpha1.MaxReferences + 1 {
				s.References = append(s.References, v1alpha1.Reference{BindingID: "b" + strings.Repeat("x", i%5) + string(rune('a'+i%26)) + string(rune('a'+i/26)), State: v1alpha1.ReferencePublished, OperationID: "o", UpdatedAt: now})
			}
		},
		"33 receipts": func(s *v1alpha1.ExecutionEnvironmentStatus) {
			for len(s.Receipts) <= v1alpha1.MaxReceipts {
				s.Receipts = append(s.Receipts, s.Receipts[0])
			}
		},
	}
	for name, mutate := range statusCases {
		t.Run(name, func(t *testing.T) {
			env := base.DeepCopy()
			env.Status = *full("x").Status.DeepCopy()
			mutate(&env.Status)
			_, err := cs.ExecutionV1alpha1().ExecutionEnvironments(ns).UpdateStatus(ctx, env, metav1.UpdateOptions{})
			if !apierrors.IsInvalid(err) {
				t.Fatalf("want Invalid, got %v", err)
			}
			if strings.Contains(name, " references") || strings.Contains(name, " receipts") {
				if !strings.Contains(err.Error(), "must have at most") {
					t.Fatalf("refused for another reason than the list bound: %v", err)
				}
			}
		})
	}
}
