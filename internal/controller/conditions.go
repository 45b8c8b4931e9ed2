package controller

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
)

// observed is what one reconcile pass saw; every condition is a pure function of it.
type observed struct {
	generation     int64
	profileKnown   bool
	profileCurrent bool
	pvc            *corev1.PersistentVolumeClaim
	pod            *corev1.Pod
	fence          executionv1alpha1.FenceState
	fenceReason    string
	deleting       bool
	operation      *executionv1alpha1.LifecycleOperation
	// terminated: the recorded executor ended (its proof is recorded) and none replaced it.
	terminated bool
	// retired: a completed Retire and no executor since.
	retired bool
	// suspended: a completed Suspend and no executor since.
	suspended bool
	// deleted: a completed Delete (a tombstone).
	deleted bool
}

// Condition reasons: a fixed vocabulary.
const (
	reasonBound           = "Bound"
	reasonPending         = "Pending"
	reasonMissing         = "Missing"
	reasonRunning         = "Running"
	reasonNotRunning      = "NotRunning"
	reasonHealthy         = "Healthy"
	reasonFenceUnknown    = "FenceUnknown"
	reasonProfileCurrent  = "ProfileCurrent"
	reasonProfileChanged  = "ProfileChanged"
	reasonProfileRemoved  = "ProfileRemoved"
	reasonDeletionBlocked = "DeletionRequiresAdministrator"
	reasonNotDeleting     = "NotDeleting"
	reasonReady           = "Ready"
	reasonNotReady        = "NotReady"
	reasonRetired         = "Retired"
	reasonSuspended       = "Suspended"
	reasonOperation       = "LifecycleOperation"
	reasonTerminated      = "Terminated"
	reasonDeleted         = "Deleted"
)

func condition(t string, ok bool, reason, message string, gen int64) metav1.Condition {
	status := metav1.ConditionFalse
	if ok {
		status = metav1.ConditionTrue
	}
	return metav1.Condition{Type: t, Status: status, Reason: reason, Message: message, ObservedGeneration: gen}
}

func workspaceBound(o observed) metav1.Condition {
	switch {
	case o.pvc == nil:
		return condition(executionv1alpha1.ConditionWorkspaceBound, false, reasonMissing, "the workspace claim does not exist", o.generation)
	case o.pvc.Status.Phase != corev1.ClaimBound:
		return condition(executionv1alpha1.ConditionWorkspaceBound, false, reasonPending, "the workspace claim is not bound yet", o.generation)
	}
	return condition(executionv1alpha1.ConditionWorkspaceBound, true, reasonBound, "the workspace claim is bound", o.generation)
}

func executorReady(o observed) metav1.Condition {
	switch op := o.operation; {
	case op.InProgress():
		return condition(executionv1alpha1.ConditionExecutorReady, false, reasonOperation, string(op.Kind)+" in progress: "+string(op.Phase), o.generation)
	case o.deleted:
		return condition(executionv1alpha1.ConditionExecutorReady, false, reasonDeleted, "the environment was deleted: its executor and its workspace are gone", o.generation)
	case o.retired:
		return condition(executionv1alpha1.ConditionExecutorReady, false, reasonRetired, "the executor was retired; the workspace is kept", o.generation)
	case o.suspended:
		return condition(executionv1alpha1.ConditionExecutorReady, false, reasonSuspended, "the environment is suspended; the workspace is kept and a resume starts a new executor", o.generation)
	case o.pod == nil && o.terminated:
		return condition(executionv1alpha1.ConditionExecutorReady, false, reasonTerminated, "the executor terminated; ReplaceExecutor starts a new one", o.generation)
	}
	if o.pod == nil {
		return condition(executionv1alpha1.ConditionExecutorReady, false, reasonMissing, "no executor Pod", o.generation)
	}
	if podReady(o.pod) {
		return condition(executionv1alpha1.ConditionExecutorReady, true, reasonRunning, "the executor Pod is ready", o.generation)
	}
	if trouble := podTrouble(o.pod); trouble != "" {
		return condition(executionv1alpha1.ConditionExecutorReady, false, reasonNotRunning, "the executor Pod is not ready: "+trouble, o.generation)
	}
	return condition(executionv1alpha1.ConditionExecutorReady, false, reasonNotRunning, "the executor Pod is not ready", o.generation)
}

// podReady: the Pod's Ready condition is true and it is not being deleted. The one
// definition of a ready executor — for an environment's ExecutorReady and for a pool
// member that may be adopted (an adopted pair is Ready by the same test at once).
func podReady(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp != nil {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func fenced(o observed) metav1.Condition {
	if o.fence == executionv1alpha1.FenceUnknown {
		return condition(executionv1alpha1.ConditionFenced, true, reasonFenceUnknown, o.fenceReason, o.generation)
	}
	return condition(executionv1alpha1.ConditionFenced, false, reasonHealthy, "every outcome is accounted for", o.generation)
}

func profileCurrent(o observed) metav1.Condition {
	switch {
	case !o.profileKnown:
		return condition(executionv1alpha1.ConditionProfileCurrent, false, reasonProfileRemoved, "the profile was removed: no new executor is created", o.generation)
	case !o.profileCurrent:
		return condition(executionv1alpha1.ConditionProfileCurrent, false, reasonProfileChanged, "the profile changed since creation: no new executor is created", o.generation)
	}
	return condition(executionv1alpha1.ConditionProfileCurrent, true, reasonProfileCurrent, "the profile is unchanged", o.generation)
}

func deletionBlocked(o observed) metav1.Condition {
	if o.deleting && !deletingWorkspace(o.operation) {
		return condition(executionv1alpha1.ConditionDeletionBlocked, true, reasonDeletionBlocked, "deleting an environment needs DeleteRetiredEnvironment; the workspace is kept", o.generation)
	}
	return condition(executionv1alpha1.ConditionDeletionBlocked, false, reasonNotDeleting, "no deletion requested", o.generation)
}

// conditions computes every condition and sets them on status (LastTransitionTime moves
// only when a status changes).
func conditions(status *executionv1alpha1.ExecutionEnvironmentStatus, o observed, now metav1.Time) {
	all := []metav1.Condition{workspaceBound(o), executorReady(o), fenced(o), profileCurrent(o), deletionBlocked(o)}
	ready := all[0].Status == metav1.ConditionTrue && all[1].Status == metav1.ConditionTrue && all[2].Status == metav1.ConditionFalse
	readyCond := condition(executionv1alpha1.ConditionReady, ready, reasonNotReady, "waiting for the workspace, the executor, or recovery", o.generation)
	if ready {
		readyCond.Reason, readyCond.Message = reasonReady, "data operations can be served"
	}
	all = append(all, readyCond)
	for _, c := range all {
		c.LastTransitionTime = now
		meta.SetStatusCondition(&status.Conditions, c)
	}
	status.Phase = phase(o, ready)
}

// phase is the printer column; nothing branches on it.
func phase(o observed, ready bool) executionv1alpha1.Phase {
	switch {
	case o.deleted:
		return executionv1alpha1.PhaseDeleted
	case o.fence == executionv1alpha1.FenceUnknown:
		return executionv1alpha1.PhaseFenced
	case o.deleting, o.operation.InProgress() && (o.operation.Kind == executionv1alpha1.LifecycleDeleteRetired || o.operation.Kind == executionv1alpha1.LifecycleDelete):
		return executionv1alpha1.PhaseDeleting
	case o.operation.InProgress() && o.operation.Kind == executionv1alpha1.LifecycleReplace:
		return executionv1alpha1.PhaseReplacing
	case o.operation.InProgress() && o.operation.Kind == executionv1alpha1.LifecycleSuspend:
		return executionv1alpha1.PhaseSuspending
	case o.operation.InProgress() && o.operation.Kind == executionv1alpha1.LifecycleResume:
		return executionv1alpha1.PhaseResuming
	case o.operation.InProgress():
		return executionv1alpha1.PhaseRetiring
	case o.retired:
		return executionv1alpha1.PhaseRetired
	case o.suspended:
		return executionv1alpha1.PhaseSuspended
	case ready:
		return executionv1alpha1.PhaseReady
	case !o.profileKnown || !o.profileCurrent, o.terminated && o.pod == nil:
		return executionv1alpha1.PhaseDegraded
	}
	return executionv1alpha1.PhaseProvisioning
}
