package control

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// The answer to the call that admitted an operation says what was admitted: the phase and
// the conditions are the controller's last pass, which has not seen it yet.
func TestEnvironmentViewReportsTheAdmittedOperation(t *testing.T) {
	ready := []metav1.Condition{{Type: executionv1alpha1.ConditionReady, Status: metav1.ConditionTrue}}
	op := func(kind executionv1alpha1.LifecycleKind, phase executionv1alpha1.LifecyclePhase) *executionv1alpha1.LifecycleOperation {
		return &executionv1alpha1.LifecycleOperation{Kind: kind, Phase: phase}
	}
	cases := []struct {
		name      string
		status    executionv1alpha1.ExecutionEnvironmentStatus
		lifecycle executionv1.LifecycleState
		ready     bool
	}{
		{"ready", executionv1alpha1.ExecutionEnvironmentStatus{Phase: executionv1alpha1.PhaseReady, Conditions: ready},
			executionv1.LifecycleState_LIFECYCLE_STATE_READY, true},
		{"suspend just admitted", executionv1alpha1.ExecutionEnvironmentStatus{Phase: executionv1alpha1.PhaseReady, Conditions: ready,
			LifecycleOperation: op(executionv1alpha1.LifecycleSuspend, executionv1alpha1.PhaseRequested)},
			executionv1.LifecycleState_LIFECYCLE_STATE_SUSPENDING, false},
		{"suspended", executionv1alpha1.ExecutionEnvironmentStatus{Phase: executionv1alpha1.PhaseSuspended,
			LifecycleOperation: op(executionv1alpha1.LifecycleSuspend, executionv1alpha1.PhaseCompleted)},
			executionv1.LifecycleState_LIFECYCLE_STATE_SUSPENDED, false},
		{"resume just admitted", executionv1alpha1.ExecutionEnvironmentStatus{Phase: executionv1alpha1.PhaseSuspended,
			LifecycleOperation: op(executionv1alpha1.LifecycleResume, executionv1alpha1.PhaseRequested)},
			executionv1.LifecycleState_LIFECYCLE_STATE_RESUMING, false},
		{"resumed", executionv1alpha1.ExecutionEnvironmentStatus{Phase: executionv1alpha1.PhaseReady, Conditions: ready,
			LifecycleOperation: op(executionv1alpha1.LifecycleResume, executionv1alpha1.PhaseCompleted)},
			executionv1.LifecycleState_LIFECYCLE_STATE_READY, true},
		{"replace just admitted", executionv1alpha1.ExecutionEnvironmentStatus{Phase: executionv1alpha1.PhaseReady, Conditions: ready,
			LifecycleOperation: op(executionv1alpha1.LifecycleReplace, executionv1alpha1.PhaseRequested)},
			executionv1.LifecycleState_LIFECYCLE_STATE_REPLACING, false},
		{"delete just admitted", executionv1alpha1.ExecutionEnvironmentStatus{Phase: executionv1alpha1.PhaseReady, Conditions: ready,
			LifecycleOperation: op(executionv1alpha1.LifecycleDelete, executionv1alpha1.PhaseRequested)},
			executionv1.LifecycleState_LIFECYCLE_STATE_DELETING, false},
		{"deleted, before a pass recorded the phase", executionv1alpha1.ExecutionEnvironmentStatus{Phase: executionv1alpha1.PhaseDeleting,
			LifecycleOperation: op(executionv1alpha1.LifecycleDelete, executionv1alpha1.PhaseCompleted)},
			executionv1.LifecycleState_LIFECYCLE_STATE_DELETED, false},
		{"fenced during an operation", executionv1alpha1.ExecutionEnvironmentStatus{Phase: executionv1alpha1.PhaseFenced, FenceState: executionv1alpha1.FenceUnknown,
			LifecycleOperation: op(executionv1alpha1.LifecycleRetire, executionv1alpha1.PhaseStoppingExecutor)},
			executionv1.LifecycleState_LIFECYCLE_STATE_DEGRADED, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := EnvironmentView(&executionv1alpha1.ExecutionEnvironment{Status: c.status})
			if v.GetLifecycle() != c.lifecycle || v.GetReady() != c.ready {
				t.Errorf("lifecycle %s ready %v, want %s %v", v.GetLifecycle(), v.GetReady(), c.lifecycle, c.ready)
			}
		})
	}
}
