package controller

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/execplane/execplane/internal/executor"
	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
)

// slim is the informers' transform: the caches keep of each object only what the
// controller reads, so that 10,000 environments with their claims and Pods fit in a small
// heap. Managed fields go from every object (a Pod's are a few KiB, written by the API
// server, the scheduler, the kubelet); of a Pod only its slimmed metadata (slimMeta), node name, phase, reason,
// condition types and statuses, and the executor container's termination and trouble (podTrouble) survive; of a
// claim its metadata and phase. Nothing here is written back: every write of the
// controller is a patch of metadata it names, a status update of an environment (whose
// spec and status are kept whole; a nil managedFields leaves the server's as they are), or
// a delete by UID and resourceVersion.
func slim(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		return slimPod(o), nil
	case *corev1.PersistentVolumeClaim:
		// The storage request: the usage ledger's claim size.
		var spec corev1.PersistentVolumeClaimSpec
		if q, ok := o.Spec.Resources.Requests[corev1.ResourceStorage]; ok {
			spec.Resources.Requests = corev1.ResourceList{corev1.ResourceStorage: q}
		}
		return &corev1.PersistentVolumeClaim{TypeMeta: o.TypeMeta, ObjectMeta: slimMeta(o.ObjectMeta), Spec: spec,
			Status: corev1.PersistentVolumeClaimStatus{Phase: o.Status.Phase}}, nil
	case *executionv1alpha1.ExecutionEnvironment:
		o.ManagedFields = nil
		return o, nil
	}
	return obj, nil // a tombstone or another type: as it is
}

// slimMeta keeps of a Pod's or a claim's metadata what the controller reads: identity,
// version, timestamps, owners, finalizers, and only the labels and annotations it looks up
// (keptLabels, keptAnnotations) — a Pod's and a claim's others (the chart's, the PV
// controller's, a mutating webhook's) were a third of the live heap at 10,000.
func slimMeta(m metav1.ObjectMeta) metav1.ObjectMeta {
	m.ManagedFields = nil
	m.Labels = keep(m.Labels, keptLabels)
	m.Annotations = keep(m.Annotations, keptAnnotations)
	return m
}

// keptLabels and keptAnnotations are the keys the controller reads of a Pod or a claim.
var (
	keptLabels      = []string{executor.LabelEnvironment, executor.LabelEnvironmentUID, executor.LabelPool}
	keptAnnotations = []string{executor.AnnotationDigest, executor.AnnotationPoolPair,
		annStorageProvisioner, annBetaStorageProvisioner, annSelectedNode}
)

// keep returns the entries of m under keys (nil when there are none).
func keep(m map[string]string, keys []string) map[string]string {
	var out map[string]string
	for _, k := range keys {
		if v, ok := m[k]; ok {
			if out == nil {
				out = make(map[string]string)
			}
			out[k] = v
		}
	}
	return out
}

func slimPod(p *corev1.Pod) *corev1.Pod {
	out := &corev1.Pod{TypeMeta: p.TypeMeta, ObjectMeta: slimMeta(p.ObjectMeta),
		Spec:   corev1.PodSpec{NodeName: p.Spec.NodeName},
		Status: corev1.PodStatus{Phase: p.Status.Phase, Reason: p.Status.Reason}}
	for _, c := range p.Status.Conditions {
		out.Status.Conditions = append(out.Status.Conditions, corev1.PodCondition{Type: c.Type, Status: c.Status})
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name != executor.ContainerName {
			continue
		}
		kept := corev1.ContainerStatus{Name: cs.Name}
		if t := cs.State.Terminated; t != nil {
			kept.State.Terminated = &corev1.ContainerStateTerminated{ExitCode: t.ExitCode, Reason: t.Reason}
		}
		if w := cs.State.Waiting; w != nil && troubles[w.Reason] {
			kept.State.Waiting = &corev1.ContainerStateWaiting{Reason: w.Reason}
		}
		out.Status.ContainerStatuses = append(out.Status.ContainerStatuses, kept)
	}
	return out
}
