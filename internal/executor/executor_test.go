package executor

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/profile"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func testEnvironment() *executionv1alpha1.ExecutionEnvironment {
	return &executionv1alpha1.ExecutionEnvironment{ObjectMeta: metav1.ObjectMeta{
		Name: "xenv-5f2c9a7be01d4c8a9f31", Namespace: "tenant-a", UID: "1b4e28ba-2fa1-11d2-883f-0016d3cca427",
	}}
}

func testProfiles(t *testing.T) *profile.Registry {
	t.Helper()
	reg, err := profile.LoadProfiles("testdata/profiles.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

func golden(t *testing.T, name string, obj any) {
	t.Helper()
	got, err := yaml.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", name+".golden.yaml")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./internal/executor -update)", err)
	}
	if string(got) != string(want) {
		t.Fatalf("%s differs from the golden file (run with -update after review):\n%s", name, got)
	}
}

func TestGoldenObjects(t *testing.T) {
	reg := testProfiles(t)
	for _, name := range reg.Names() {
		entry, _ := reg.Get(name)
		pod, err := Pod(testEnvironment(), entry, PodOptions{Ordinal: 3, ServiceAccount: "execplane-executor"})
		if err != nil {
			t.Fatal(err)
		}
		golden(t, "pod-"+name, pod)
		pvc, err := PVC(testEnvironment(), entry)
		if err != nil {
			t.Fatal(err)
		}
		golden(t, "pvc-"+name, pvc)
	}
}

func TestInvariants(t *testing.T) {
	reg := testProfiles(t)
	entry, _ := reg.Get("minimal")
	env := testEnvironment()
	pod, err := Pod(env, entry, PodOptions{Ordinal: 0, ServiceAccount: "sa"})
	if err != nil {
		t.Fatal(err)
	}
	pvc, _ := PVC(env, entry)
	if len(pvc.OwnerReferences) != 0 {
		t.Fatal("the workspace claim must never have an owner reference")
	}
	if ref := metav1.GetControllerOf(pod); ref == nil || ref.UID != env.UID {
		t.Fatal("the Pod must be controlled by its environment")
	}
	if len(pod.Finalizers) != 1 || pod.Finalizers[0] != TerminationFinalizer {
		t.Fatalf("finalizers %v", pod.Finalizers)
	}
	if *pod.Spec.AutomountServiceAccountToken || pod.Spec.RestartPolicy != "Never" {
		t.Fatal("token mounted or restarts allowed")
	}
	next, _ := Pod(env, entry, PodOptions{Ordinal: 1, ServiceAccount: "sa"})
	if next.Name == pod.Name {
		t.Fatal("a replacement Pod reuses the old name")
	}
	if pod.Spec.Volumes[0].PersistentVolumeClaim.ClaimName != pvc.Name {
		t.Fatal("the Pod does not mount the workspace claim")
	}
}

func TestBuildersRefuseIncompleteInput(t *testing.T) {
	if _, err := PVC(testEnvironment(), profile.Entry{}); !errors.Is(err, ErrIncompleteProfile) {
		t.Fatalf("PVC without size: %v", err)
	}
	if _, err := Pod(testEnvironment(), profile.Entry{}, PodOptions{ServiceAccount: "sa"}); !errors.Is(err, ErrIncompleteProfile) {
		t.Fatalf("Pod without image: %v", err)
	}
	reg := testProfiles(t)
	entry, _ := reg.Get("minimal")
	if _, err := Pod(testEnvironment(), entry, PodOptions{}); err == nil {
		t.Fatal("Pod without a ServiceAccount accepted")
	}
}
