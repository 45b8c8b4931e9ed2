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
// server, the scheduler, the kubelet); of a Pod only its metadata, node name, phase, reason,
// condition types and statuses, and the executor container's termination survive; of a
// claim its metadata and phase. Nothing here is written back: every write of the
// controller is a patch of metadata it names, a status update of an environment (whose
// spec and status are kept whole; a nil managedFields leaves the server's as they are), or
// a delete by UID and resourceVersion.
func slim(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		return slimPod(o), nil
	case *corev1.PersistentVolumeClaim:
		return &corev1.PersistentVolumeClaim{TypeMeta: o.TypeMeta, ObjectMeta: slimMeta(o.ObjectMeta),
			Status: corev1.PersistentVolumeClaimStatus{Phase: o.Status.Phase}}, nil
	case *executionv1alpha1.ExecutionEnvironment:
		o.ManagedFields = nil
		return o, nil
	}
	return obj, nil // a tombstone or another type: as it is
}

func slimMeta(m metav1.ObjectMeta) metav1.ObjectMeta {
	m.ManagedFields = nil
	return m
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
		out.Status.ContainerStatuses = append(out.Status.ContainerStatuses, kept)
	}
	return out
}
