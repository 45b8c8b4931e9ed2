package executor

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/pkg/store"
)

const testOwnerKey = "0123456789abcdef"

func testCopy(node string) CopyOptions {
	return CopyOptions{
		Name: "xsnap-" + testOwnerKey + "-5f2c9a7be01d4c8a9f31-copy", Namespace: "tenant-a",
		Snapshot: "xsnap-5f2c9a7be01d4c8a9f31", OwnerKey: testOwnerKey,
		Source: "xenv-5f2c9a7be01d4c8a9f31-workspace", Target: store.SnapshotStorageName(testOwnerKey, "5f2c9a7be01d4c8a9f31"),
		Node: node, ServiceAccount: "execplane-executor", Deadline: 2 * time.Minute,
	}
}

// The copy Pod of every test profile, the snapshot's claim and VolumeSnapshot, and a claim
// restored from a VolumeSnapshot, as golden files.
func TestGoldenSnapshotObjects(t *testing.T) {
	reg := testProfiles(t)
	for _, name := range reg.Names() {
		entry, _ := reg.Get(name)
		node := ""
		if name == "full" {
			node = "node-a"
		}
		pod, err := CopyPod(entry, testCopy(node))
		if err != nil {
			t.Fatal(err)
		}
		golden(t, "copy-pod-"+name, pod)
	}
	o := testCopy("")
	golden(t, "snapshot-claim", SnapshotClaim(o.Target, o.Namespace, o.Snapshot, testOwnerKey, "standard", 1<<30))
	golden(t, "volume-snapshot", VolumeSnapshot(o.Target, o.Namespace, o.Snapshot, testOwnerKey, o.Source, "csi-hostpath-snapclass").Object)
	entry, _ := reg.Get("minimal")
	claim, err := PVC(testEnvironment(), entry)
	if err != nil {
		t.Fatal(err)
	}
	RestoreFrom(claim, o.Target, testOwnerKey, 8<<30)
	golden(t, "pvc-restored", claim)
}

// The copy Pod mounts its source read-only, runs the helper's mirror and nothing else, is
// retried in place and bounded in time, and carries no token.
func TestCopyPodInvariants(t *testing.T) {
	reg := testProfiles(t)
	entry, _ := reg.Get("helper-image")
	pod, err := CopyPod(entry, testCopy(""))
	if err != nil {
		t.Fatal(err)
	}
	c := pod.Spec.Containers[0]
	if c.Image != entry.Spec.HelperImage || c.Command[1] != "--mirror" || len(pod.Spec.InitContainers) != 0 {
		t.Fatalf("a helper image profile's copy runs %s %v", c.Image, c.Command)
	}
	for _, v := range pod.Spec.Volumes {
		if v.Name == "source" && !v.PersistentVolumeClaim.ReadOnly {
			t.Fatal("the source is mounted writable")
		}
	}
	for _, m := range c.VolumeMounts {
		if m.Name == "source" && !m.ReadOnly {
			t.Fatal("the source mount is writable")
		}
	}
	if *pod.Spec.AutomountServiceAccountToken || pod.Spec.RestartPolicy != corev1.RestartPolicyOnFailure || *pod.Spec.ActiveDeadlineSeconds != 120 {
		t.Fatalf("token %v, restart %s, deadline %v", *pod.Spec.AutomountServiceAccountToken, pod.Spec.RestartPolicy, *pod.Spec.ActiveDeadlineSeconds)
	}
	for name, o := range map[string]CopyOptions{
		"no service account": func() CopyOptions { o := testCopy(""); o.ServiceAccount = ""; return o }(),
		"one claim":          func() CopyOptions { o := testCopy(""); o.Target = o.Source; return o }(),
		"no deadline":        func() CopyOptions { o := testCopy(""); o.Deadline = 0; return o }(),
	} {
		if _, err := CopyPod(entry, o); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// A restore asks for at least the snapshot's size, never less than the profile's.
	claim, _ := PVC(testEnvironment(), entry)
	before := claim.Spec.Resources.Requests.Storage().DeepCopy()
	RestoreFrom(claim, "", testOwnerKey, 1)
	if claim.Spec.Resources.Requests.Storage().Cmp(before) != 0 || claim.Spec.DataSource != nil || claim.Labels[LabelOwnerKey] != testOwnerKey {
		t.Fatalf("a copy restore's claim: %v", claim)
	}
	RestoreFrom(claim, "snap", testOwnerKey, before.Value()+1)
	if got := claim.Spec.Resources.Requests.Storage(); got.Cmp(*resource.NewQuantity(before.Value()+1, resource.BinarySI)) != 0 {
		t.Fatalf("restore size %v", got)
	}
}

// The restricted namespace admits every profile's copy Pod.
func TestPodSecurityRestrictedAdmitsTheCopyPod(t *testing.T) {
	c := clustertest.Cluster(t)
	ns := clustertest.Namespace(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	reg := testProfiles(t)
	for _, name := range reg.Names() {
		if name == "full" {
			continue // its RuntimeClass: TestPodSecurityRestrictedAdmitsTheExecutorPod creates it
		}
		entry, _ := reg.Get(name)
		o := testCopy("")
		o.Namespace, o.ServiceAccount = ns, "default"
		pod, err := CopyPod(entry, o)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Kube().CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			t.Fatalf("profile %s: the restricted namespace refused the copy Pod: %v", name, err)
		}
		if strings.Contains(pod.Spec.Containers[0].Command[0], " ") {
			t.Fatalf("command %v", pod.Spec.Containers[0].Command)
		}
	}
}
