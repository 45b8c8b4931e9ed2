package chart_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/execplane/execplane/internal/dev/devcluster"
	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/internal/executor"
	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/profile"
)

// Snapshots' objects under the chart's policies (docs/snapshots.md "Names, owners and
// admission"), evaluated by the API server under the controller's identity, dry run: the
// copy Pods, snapshot claims, restored claims and VolumeSnapshots internal/executor builds
// are admitted; a restore from another owner's snapshot — a claim whose dataSource names a
// VolumeSnapshot of another owner key than its own — is refused, and so is each copy Pod or
// VolumeSnapshot that reaches past its owner's storage.
func TestAdmissionPolicyHoldsSnapshotsToTheirOwner(t *testing.T) {
	c := clustertest.Cluster(t)
	admin := c.Kube()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	bin, err := devcluster.FindCSIBinaries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.InstallCRDs(ctx, filepath.Join(bin, "crd")); err != nil {
		t.Fatal(err)
	}
	in := install(t, installOptions{set: []string{"executorNamespace.create=false"}, values: []string{profilesValues(t)}, before: func(release string) {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: release + "-executors"}}
		if _, err := admin.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = admin.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{}) })
	}})
	controller, cfg := as(t, in.release, "execplane-controller")
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := profile.LoadProfiles("../../internal/executor/testdata/profiles.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const (
		key, otherKey = "0123456789abcdef", "fedcba9876543210"
		snapshotName  = "xsnap-5f2c9a7be01d4c8a9f31"
	)
	storage, stranger := "xsnap-"+key+"-0a1b2c3d4e5f60718293", "xsnap-"+otherKey+"-0a1b2c3d4e5f60718293"
	env := &executionv1alpha1.ExecutionEnvironment{ObjectMeta: metav1.ObjectMeta{
		Name: "xenv-5f2c9a7be01d4c8a9f31", Namespace: in.executors, UID: "1b4e28ba-2fa1-11d2-883f-0016d3cca427"}}
	workspace := env.Name + "-workspace"
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	refused := func(what, rule string, err error) {
		t.Helper()
		if !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) {
			t.Errorf("%s: admitted or refused for another reason: %v", what, err)
			return
		}
		if !strings.Contains(err.Error(), "ValidatingAdmissionPolicy") || !strings.Contains(err.Error(), rule) {
			t.Errorf("%s: refused, but not by the rule %q: %v", what, rule, err)
		}
	}

	// Copy Pods: a cut (workspace → the snapshot's claim) and a restore (the snapshot's
	// claim → a new environment's workspace), of an image profile and of a helper-image one.
	copyPod := func(profileName, source, target string) *corev1.Pod {
		entry, _ := reg.Get(profileName)
		pod, err := executor.CopyPod(entry, executor.CopyOptions{Name: "copy", Namespace: in.executors, Snapshot: snapshotName,
			OwnerKey: key, Source: source, Target: target, ServiceAccount: "execplane-executor", Deadline: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return pod
	}
	createPod := func(pod *corev1.Pod) error {
		_, err := controller.CoreV1().Pods(in.executors).Create(ctx, pod, dry)
		return err
	}
	// Each policy takes effect when the API server's informer has it, one object at a
	// time: each section waits for its own before it judges the others' answers.
	clustertest.Eventually(t, time.Minute, "the Pods policy in force", func() bool {
		return createPod(copyPod("minimal", workspace, stranger)) != nil
	})
	for _, p := range []struct{ profile, source, target string }{
		{"minimal", workspace, storage}, {"minimal", storage, workspace}, {"helper-image", workspace, storage},
		{"minimal", "warm-minimal-abcdefgh", storage},
	} {
		if err := createPod(copyPod(p.profile, p.source, p.target)); err != nil {
			t.Errorf("the policy refused the copy Pod of %s from %s to %s: %v", p.profile, p.source, p.target, err)
		}
	}
	for name, v := range map[string]struct {
		rule string
		pod  func() *corev1.Pod
	}{
		"into another owner's snapshot claim": {"copy between", func() *corev1.Pod { return copyPod("minimal", workspace, stranger) }},
		"from another owner's snapshot claim": {"copy between", func() *corev1.Pod { return copyPod("minimal", stranger, workspace) }},
		"between two workspaces": {"copy between", func() *corev1.Pod {
			return copyPod("minimal", workspace, "xenv-0000000000000000000a-workspace")
		}},
		"with a writable source": {"the source read-only", func() *corev1.Pod {
			p := copyPod("minimal", workspace, storage)
			p.Spec.Volumes[0].PersistentVolumeClaim.ReadOnly = false
			return p
		}},
		"with a Secret": {"mount only", func() *corev1.Pod {
			p := copyPod("minimal", workspace, storage)
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "keys", VolumeSource: corev1.VolumeSource{
				Secret: &corev1.SecretVolumeSource{SecretName: "execplane-security"}}})
			return p
		}},
		"of another image": {"helper image", func() *corev1.Pod {
			p := copyPod("minimal", workspace, storage)
			p.Spec.Containers[0].Image = "registry.example/attacker:1"
			return p
		}},
		"of the helper-image profile's executor image": {"helper image", func() *corev1.Pod {
			p := copyPod("helper-image", workspace, storage)
			entry, _ := reg.Get("helper-image")
			p.Spec.Containers[0].Image = entry.Spec.Image
			return p
		}},
		"with a label of its own": {"copy labels", func() *corev1.Pod {
			p := copyPod("minimal", workspace, storage)
			p.Labels[executor.LabelEnvironment] = env.Name // what the NetworkPolicies select executors by
			return p
		}},
		"as root": {"run restricted", func() *corev1.Pod {
			p := copyPod("minimal", workspace, storage)
			p.Spec.SecurityContext.RunAsUser = new(int64)
			return p
		}},
	} {
		refused("a copy Pod "+name, v.rule, createPod(v.pod()))
	}

	// Claims: a snapshot's own, named with its owner key; a workspace restored from a
	// VolumeSnapshot of its owner key. Another owner's snapshot, a clone, a mislabelled
	// snapshot claim and a changed owner key are refused.
	entry, _ := reg.Get("minimal")
	restored := func(from string) *corev1.PersistentVolumeClaim {
		pvc, err := executor.PVC(env, entry)
		if err != nil {
			t.Fatal(err)
		}
		executor.RestoreFrom(pvc, from, key, 2<<30)
		return pvc
	}
	createClaim := func(pvc *corev1.PersistentVolumeClaim) error {
		_, err := controller.CoreV1().PersistentVolumeClaims(in.executors).Create(ctx, pvc, dry)
		return err
	}
	clustertest.Eventually(t, time.Minute, "the claims policy in force", func() bool {
		return createClaim(restored(stranger)) != nil
	})
	if err := createClaim(restored(storage)); err != nil {
		t.Errorf("the policy refused a restore from the owner's snapshot: %v", err)
	}
	if err := createClaim(restored("")); err != nil {
		t.Errorf("the policy refused a copy restore's claim: %v", err)
	}
	if err := createClaim(executor.SnapshotClaim(storage, in.executors, snapshotName, key, "standard", 1<<30)); err != nil {
		t.Errorf("the policy refused a snapshot's claim: %v", err)
	}
	refused("a restore from another owner's snapshot", "of their own owner key", createClaim(restored(stranger)))
	refused("a snapshot's claim of another owner key", "carries the owner key its name does",
		createClaim(executor.SnapshotClaim(stranger, in.executors, snapshotName, key, "standard", 1<<30)))
	unlabelled := restored(storage)
	delete(unlabelled.Labels, executor.LabelOwnerKey)
	refused("a restore without an owner key", "of their own owner key", createClaim(unlabelled))
	other := restored(storage)
	other.Spec.DataSource.Kind = "PersistentVolumeClaim"
	other.Spec.DataSource.APIGroup = nil
	other.Spec.DataSource.Name = "xenv-0000000000000000000a-workspace"
	refused("a clone of another claim", "of their own owner key", createClaim(other))
	// A claim that exists keeps its owner key.
	existing := restored(storage)
	existing.Name = "restored-claim"
	existing.Spec.StorageClassName = new(string)
	*existing.Spec.StorageClassName = "no-provisioner"
	if _, err := admin.CoreV1().PersistentVolumeClaims(in.executors).Create(ctx, existing, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = controller.CoreV1().PersistentVolumeClaims(in.executors).Patch(ctx, existing.Name, types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"execution.mecatl.dev/owner-key":"`+otherKey+`"}}}`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
	refused("an owner key changed", "never changed", err)

	// VolumeSnapshots (the csi method): of a workspace claim, named with their owner key.
	vss := dyn.Resource(executor.VolumeSnapshotGVR).Namespace(in.executors)
	clustertest.Eventually(t, time.Minute, "the VolumeSnapshots policy in force", func() bool {
		_, err := vss.Create(ctx, executor.VolumeSnapshot(stranger, in.executors, snapshotName, key, workspace, "snapclass"), dry)
		return err != nil
	})
	if _, err := vss.Create(ctx, executor.VolumeSnapshot(storage, in.executors, snapshotName, key, workspace, "snapclass"), dry); err != nil {
		t.Errorf("the policy refused the VolumeSnapshot of a workspace: %v", err)
	}
	_, err = vss.Create(ctx, executor.VolumeSnapshot(stranger, in.executors, snapshotName, key, workspace, "snapclass"), dry)
	refused("a VolumeSnapshot named with another owner key", "named with the owner key", err)
	_, err = vss.Create(ctx, executor.VolumeSnapshot(storage, in.executors, snapshotName, key, "another-claim", "snapclass"), dry)
	refused("a VolumeSnapshot of a claim not a workspace", "of a workspace claim", err)
}
