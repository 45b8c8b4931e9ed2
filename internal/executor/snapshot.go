package executor

import (
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"github.com/execplane/execplane/pkg/profile"
)

// Snapshots' objects in the executor namespace (docs/snapshots.md).
const (
	// LabelSnapshot names the ExecutionSnapshot a VolumeSnapshot, a copy claim or a copy Pod
	// belongs to.
	LabelSnapshot = "execution.mecatl.dev/snapshot"
	// LabelOwnerKey is the owner key (16 hex digits over client and owner) that a snapshot's
	// storage name and every claim restored from it carry: what the claims admission policy
	// compares, as it cannot look a snapshot up.
	LabelOwnerKey = "execution.mecatl.dev/owner-key"
	// ComponentCopy marks a copy Pod; componentSnapshot a snapshot's VolumeSnapshot or claim.
	ComponentCopy     = "workspace-copy"
	componentSnapshot = "snapshot"
	// Where the copy Pod mounts its two claims.
	copySourcePath = "/source"
	copyTargetPath = "/target"
	// copyContainer is the copy Pod's one container.
	copyContainer = "copy"
	// copyMemory bounds the copy's memory: a directory's names are read whole (2 million
	// entries at most), the data itself streams.
	copyMemory = "256Mi"
)

// VolumeSnapshotGVR is the CSI snapshot API the csi method uses
// (snapshot.storage.k8s.io/v1, installed with the external snapshotter's CRDs).
var VolumeSnapshotGVR = schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshots"}

func snapshotLabels(snapshot, ownerKey, component string) map[string]string {
	return map[string]string{
		LabelName: appName, LabelComponent: component, LabelManagedBy: managedBy,
		LabelSnapshot: snapshot, LabelOwnerKey: ownerKey,
	}
}

// SnapshotClaim builds the claim a copy snapshot keeps its files in: the source's storage
// class and size. Like a workspace claim it has no owner reference (the controller deletes
// it with its snapshot).
func SnapshotClaim(name, namespace, snapshot, ownerKey, storageClass string, bytes int64) *corev1.PersistentVolumeClaim {
	c := &corev1.PersistentVolumeClaim{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "PersistentVolumeClaim"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: snapshotLabels(snapshot, ownerKey, componentSnapshot)},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceStorage: *resource.NewQuantity(bytes, resource.BinarySI)},
			},
		},
	}
	if storageClass != "" {
		c.Spec.StorageClassName = ptr.To(storageClass)
	}
	return c
}

// VolumeSnapshot builds a csi snapshot of the workspace claim sourceClaim.
func VolumeSnapshot(name, namespace, snapshot, ownerKey, sourceClaim, class string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": VolumeSnapshotGVR.GroupVersion().String(),
		"kind":       "VolumeSnapshot",
		"metadata": map[string]any{
			"name": name, "namespace": namespace,
		},
		"spec": map[string]any{
			"volumeSnapshotClassName": class,
			"source":                  map[string]any{"persistentVolumeClaimName": sourceClaim},
		},
	}}
	u.SetLabels(snapshotLabels(snapshot, ownerKey, componentSnapshot))
	return u
}

// RestoreFrom makes a new workspace claim start from a csi snapshot: its dataSource, the
// owner key label admission compares with the snapshot's name, and at least the
// snapshot's size. A copy restore is a fresh claim filled by a copy Pod (CopyPod) instead,
// labelled the same way.
func RestoreFrom(claim *corev1.PersistentVolumeClaim, volumeSnapshot, ownerKey string, restoreBytes int64) {
	claim.Labels[LabelOwnerKey] = ownerKey
	if volumeSnapshot != "" {
		claim.Spec.DataSource = &corev1.TypedLocalObjectReference{
			APIGroup: ptr.To(VolumeSnapshotGVR.Group), Kind: "VolumeSnapshot", Name: volumeSnapshot,
		}
	}
	if want := resource.NewQuantity(restoreBytes, resource.BinarySI); restoreBytes > 0 && claim.Spec.Resources.Requests.Storage().Cmp(*want) < 0 {
		claim.Spec.Resources.Requests[corev1.ResourceStorage] = *want
	}
}

// CopyOptions are a copy Pod's inputs.
type CopyOptions struct {
	// Name and Namespace of the Pod.
	Name, Namespace string
	// Snapshot and OwnerKey label it.
	Snapshot, OwnerKey string
	// Source is mounted read-only, Target read-write: the helper makes Target equal to
	// Source.
	Source, Target string
	// Node, when set, is where the Pod must run: the node that mounts the source (a
	// ReadWriteOnce claim mounts on one node).
	Node string
	// ServiceAccount is the token-less ServiceAccount executors run as.
	ServiceAccount string
	// Deadline bounds the Pod's life (activeDeadlineSeconds); its retries are within it.
	Deadline time.Duration
	// EnvironmentUID, for a restore's copy, is the environment incarnation it fills
	// (LabelEnvironmentUID): another incarnation of the same name never takes it as its own.
	EnvironmentUID string
}

// CopyPod builds the one-shot Pod that copies one claim into another with the helper's
// --mirror: the profile's helper (its helper image, or its executor image's helper), the
// executor's identity, security context, sandbox (runtime class), placement and pull
// secrets, no network need, no token; retried in place on failure (the mirror goes on from
// where it stopped) until Deadline. Its result is the container's termination message.
func CopyPod(p profile.Entry, o CopyOptions) (*corev1.Pod, error) {
	if o.ServiceAccount == "" {
		return nil, errors.New("executor: a ServiceAccount is required (never the namespace default)")
	}
	if o.Source == "" || o.Target == "" || o.Source == o.Target {
		return nil, fmt.Errorf("executor: a copy needs two claims (source %q, target %q)", o.Source, o.Target)
	}
	if o.Deadline < time.Second {
		return nil, errors.New("executor: a copy needs a deadline")
	}
	spec := p.Spec
	image, helper := spec.Image, spec.HelperPath
	if helper == "" {
		helper = profile.DefaultHelperPath
	}
	if spec.HelperImage != "" {
		image, helper = spec.HelperImage, profile.DefaultHelperPath
	}
	if image == "" {
		return nil, fmt.Errorf("%w: image", ErrIncompleteProfile)
	}
	small := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")}
	limits := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse(copyMemory)}
	pod := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name: o.Name, Namespace: o.Namespace,
			Labels:      snapshotLabels(o.Snapshot, o.OwnerKey, ComponentCopy),
			Annotations: map[string]string{AnnotationProfile: p.Name, AnnotationDigest: p.Digest},
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyOnFailure,
			ActiveDeadlineSeconds:         ptr.To(int64(o.Deadline / time.Second)),
			ServiceAccountName:            o.ServiceAccount,
			AutomountServiceAccountToken:  ptr.To(false),
			EnableServiceLinks:            ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](terminationGraceSeconds),
			RuntimeClassName:              nonEmpty(spec.RuntimeClassName),
			NodeSelector:                  copyMap(spec.NodeSelector),
			Tolerations:                   append([]corev1.Toleration(nil), spec.Tolerations...),
			SecurityContext:               podSecurity(),
			Containers: []corev1.Container{{
				Name:            copyContainer,
				Image:           image,
				ImagePullPolicy: corev1.PullIfNotPresent,
				Command: []string{helper, "--mirror", copySourcePath, "--root", copyTargetPath,
					"--mirror-report", corev1.TerminationMessagePathDefault},
				Resources:       corev1.ResourceRequirements{Requests: small, Limits: limits},
				SecurityContext: containerSecurity(),
				VolumeMounts: []corev1.VolumeMount{
					{Name: "source", MountPath: copySourcePath, ReadOnly: true},
					{Name: "target", MountPath: copyTargetPath},
				},
				TerminationMessagePath:   corev1.TerminationMessagePathDefault,
				TerminationMessagePolicy: corev1.TerminationMessageReadFile,
			}},
			Volumes: []corev1.Volume{
				{Name: "source", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: o.Source, ReadOnly: true}}},
				{Name: "target", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: o.Target}}},
			},
		},
	}
	if o.EnvironmentUID != "" {
		pod.Labels[LabelEnvironmentUID] = o.EnvironmentUID
	}
	if o.Node != "" {
		pod.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{o.Node}}},
			}}},
		}}
	}
	for _, s := range spec.ImagePullSecrets {
		pod.Spec.ImagePullSecrets = append(pod.Spec.ImagePullSecrets, corev1.LocalObjectReference{Name: s})
	}
	return pod, nil
}
