package controller

import (
	"context"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/execplane/execplane/internal/executor"
	"github.com/execplane/execplane/internal/failpoint"
	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
)

// failBeforeRelease fires after a termination proof is persisted and before the Pod's
// finalizer is removed.
const failBeforeRelease = "before-finalizer-removal"

// Proof reasons beyond the container's own.
const (
	proofNeverScheduled = "NeverScheduled"
	maxProofReason      = 256 // the CRD's bound on terminationProof.reason
)

// terminationOf returns proof that the Pod's containers have stopped for good, or false when
// that cannot be shown yet. Two observations prove it: a terminal phase (the kubelet reports
// Succeeded or Failed only once every container has stopped and none will restart), or a
// Pod being deleted that was never bound to a node (the API server refuses to bind a
// terminating Pod, so nothing ever ran).
func terminationOf(pod *corev1.Pod, now metav1.Time) (executionv1alpha1.TerminationProof, bool) {
	proof := executionv1alpha1.TerminationProof{PodName: pod.Name, PodUID: pod.UID, ObservedAt: now}
	switch {
	case pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed:
		proof.PodPhase = string(pod.Status.Phase)
		proof.Reason = pod.Status.Reason
		for _, cs := range pod.Status.ContainerStatuses {
			if t := cs.State.Terminated; t != nil && cs.Name == executor.ContainerName {
				code := t.ExitCode
				proof.ExitCode = &code
				if proof.Reason == "" {
					proof.Reason = t.Reason
				}
			}
		}
	case pod.DeletionTimestamp != nil && pod.Spec.NodeName == "":
		proof.Reason = proofNeverScheduled
	default:
		return proof, false
	}
	if len(proof.Reason) > maxProofReason {
		proof.Reason = proof.Reason[:maxProofReason]
	}
	return proof, true
}

// settleTermination records the executor's termination proof once it can be shown, and only
// after that proof is persisted releases the Pod's finalizer so it may go. It runs whether or
// not an operation stopped the Pod: a Pod deleted by hand is accounted for the same way.
func (p *pass) settleTermination(ctx context.Context) error {
	pod := p.o.pod
	if pod == nil {
		return nil
	}
	recorded := p.persisted.TerminationProof
	if recorded == nil || recorded.PodUID != pod.UID {
		if proof, ok := terminationOf(pod, p.now); ok {
			p.status.TerminationProof = &proof
			p.record(false, EventTerminationRecorded, "executor Pod %s terminated (%s)", pod.Name, proofSummary(proof))
		}
		return nil
	}
	if pod.DeletionTimestamp == nil || !slices.Contains(pod.Finalizers, executor.TerminationFinalizer) {
		return nil // terminal but not deleted: kept until an operation removes it
	}
	failpoint.Inject(failBeforeRelease)
	return p.r.releasePod(ctx, pod)
}

func proofSummary(p executionv1alpha1.TerminationProof) string {
	s := p.PodPhase
	if s == "" {
		s = "not started"
	}
	if p.Reason != "" {
		s += ", " + p.Reason
	}
	return s
}
