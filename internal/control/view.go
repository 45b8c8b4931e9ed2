package control

import (
	"maps"

	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/apimachinery/pkg/api/meta"

	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// maxMessage bounds Environment.message (the proto's bound).
const maxMessage = 1024

var lifecycles = map[executionv1alpha1.Phase]executionv1.LifecycleState{
	// No phase yet: a quiet start writes its status first when Ready (or in trouble).
	"":                                  executionv1.LifecycleState_LIFECYCLE_STATE_PROVISIONING,
	executionv1alpha1.PhaseProvisioning: executionv1.LifecycleState_LIFECYCLE_STATE_PROVISIONING,
	executionv1alpha1.PhaseReady:        executionv1.LifecycleState_LIFECYCLE_STATE_READY,
	executionv1alpha1.PhaseReplacing:    executionv1.LifecycleState_LIFECYCLE_STATE_REPLACING,
	executionv1alpha1.PhaseRetiring:     executionv1.LifecycleState_LIFECYCLE_STATE_RETIRING,
	executionv1alpha1.PhaseRetired:      executionv1.LifecycleState_LIFECYCLE_STATE_RETIRED,
	executionv1alpha1.PhaseDeleting:     executionv1.LifecycleState_LIFECYCLE_STATE_DELETING,
	executionv1alpha1.PhaseDegraded:     executionv1.LifecycleState_LIFECYCLE_STATE_DEGRADED,
	executionv1alpha1.PhaseFenced:       executionv1.LifecycleState_LIFECYCLE_STATE_DEGRADED,
	executionv1alpha1.PhaseSuspending:   executionv1.LifecycleState_LIFECYCLE_STATE_SUSPENDING,
	executionv1alpha1.PhaseSuspended:    executionv1.LifecycleState_LIFECYCLE_STATE_SUSPENDED,
	executionv1alpha1.PhaseResuming:     executionv1.LifecycleState_LIFECYCLE_STATE_RESUMING,
	executionv1alpha1.PhaseDeleted:      executionv1.LifecycleState_LIFECYCLE_STATE_DELETED,
}

// operationLifecycles is the lifecycle of an operation in progress. The store admits an
// operation in the same write that answers the caller, before the controller's next pass
// recomputes the phase and the conditions: the answer says what was admitted, not what
// the last pass saw.
var operationLifecycles = map[executionv1alpha1.LifecycleKind]executionv1.LifecycleState{
	executionv1alpha1.LifecycleRetire:        executionv1.LifecycleState_LIFECYCLE_STATE_RETIRING,
	executionv1alpha1.LifecycleReplace:       executionv1.LifecycleState_LIFECYCLE_STATE_REPLACING,
	executionv1alpha1.LifecycleDeleteRetired: executionv1.LifecycleState_LIFECYCLE_STATE_DELETING,
	executionv1alpha1.LifecycleSuspend:       executionv1.LifecycleState_LIFECYCLE_STATE_SUSPENDING,
	executionv1alpha1.LifecycleResume:        executionv1.LifecycleState_LIFECYCLE_STATE_RESUMING,
	executionv1alpha1.LifecycleDelete:        executionv1.LifecycleState_LIFECYCLE_STATE_DELETING,
}

var deadlineActions = map[executionv1alpha1.DeadlineAction]executionv1.DeadlineAction{
	executionv1alpha1.DeadlineDelete:  executionv1.DeadlineAction_DEADLINE_ACTION_DELETE,
	executionv1alpha1.DeadlineSuspend: executionv1.DeadlineAction_DEADLINE_ACTION_SUSPEND,
}

// EnvironmentView is what a caller may see of an environment (never the owner, never
// receipts).
func EnvironmentView(env *executionv1alpha1.ExecutionEnvironment) *executionv1.Environment {
	st := env.Status
	lifecycle, inOperation := lifecycles[st.Phase], st.LifecycleOperation.InProgress()
	if inOperation && st.FenceState != executionv1alpha1.FenceUnknown {
		if l, ok := operationLifecycles[st.LifecycleOperation.Kind]; ok {
			lifecycle = l
		}
	}
	v := &executionv1.Environment{
		Ref:             &executionv1.EnvironmentRef{Id: env.Name, Revision: string(env.UID)},
		BindingId:       env.Spec.BindingID,
		Profile:         env.Spec.Profile,
		ProfileDigest:   env.Spec.ProfileDigest,
		Lifecycle:       lifecycle,
		Ready:           meta.IsStatusConditionTrue(st.Conditions, executionv1alpha1.ConditionReady) && !inOperation,
		FenceState:      executionv1.FenceState_FENCE_STATE_HEALTHY,
		Epoch:           uint64(st.Epoch),
		GrantGeneration: uint64(st.GrantGeneration),
		SchemaVersion:   uint32(env.Spec.SchemaVersion),
		CreatedAt:       timestamppb.New(env.CreationTimestamp.Time),
	}
	if st.Deleted() {
		v.Lifecycle = executionv1.LifecycleState_LIFECYCLE_STATE_DELETED // before the pass that records the phase
	}
	v.Retained = st.Retained()
	if len(env.Spec.CallerMetadata) > 0 {
		v.Metadata = maps.Clone(env.Spec.CallerMetadata)
	}
	if d := st.Deadline; d != nil {
		v.Deadline, v.DeadlineAction = timestamppb.New(d.At.Time), deadlineActions[d.Action]
	}
	if v.Lifecycle == executionv1.LifecycleState_LIFECYCLE_STATE_UNSPECIFIED {
		v.Lifecycle = executionv1.LifecycleState_LIFECYCLE_STATE_PROVISIONING
	}
	if st.FenceState == executionv1alpha1.FenceUnknown {
		v.FenceState = executionv1.FenceState_FENCE_STATE_FENCE_UNKNOWN
		v.Message = st.FenceReason
	} else if c := meta.FindStatusCondition(st.Conditions, executionv1alpha1.ConditionReady); c != nil {
		v.Message = c.Message
	}
	if len(v.Message) > maxMessage {
		v.Message = v.Message[:maxMessage]
	}
	if st.ActiveRun != nil {
		v.ActiveRun = RunView(st.ActiveRun)
	}
	for i := range st.References {
		v.References = append(v.References, ReferenceView(&st.References[i]))
	}
	if st.Pod != nil {
		v.PodUid = string(st.Pod.UID)
	}
	if st.PVC != nil {
		v.PvcUid = string(st.PVC.UID)
	}
	return v
}

var referenceStates = map[executionv1alpha1.ReferenceState]executionv1.ReferenceState{
	executionv1alpha1.ReferencePendingCreate:    executionv1.ReferenceState_REFERENCE_STATE_PENDING_CREATE,
	executionv1alpha1.ReferencePublished:        executionv1.ReferenceState_REFERENCE_STATE_PUBLISHED,
	executionv1alpha1.ReferencePendingDelete:    executionv1.ReferenceState_REFERENCE_STATE_PENDING_DELETE,
	executionv1alpha1.ReferenceReserveSuccessor: executionv1.ReferenceState_REFERENCE_STATE_RESERVED_SUCCESSOR,
}

// ReferenceView converts a reference.
func ReferenceView(r *executionv1alpha1.Reference) *executionv1.Reference {
	if r == nil {
		return nil
	}
	return &executionv1.Reference{BindingId: r.BindingID, State: referenceStates[r.State], SourceBindingId: r.SourceBindingID,
		OperationId: r.OperationID, UpdatedAt: timestamppb.New(r.UpdatedAt.Time)}
}

// RunView converts a run claim.
func RunView(r *executionv1alpha1.RunClaim) *executionv1.RunClaim {
	if r == nil {
		return nil
	}
	return &executionv1.RunClaim{BindingId: r.BindingID, RunId: r.RunID, ClaimId: r.ClaimID, Epoch: uint64(r.Epoch),
		GrantGeneration: uint64(r.GrantGeneration), ExpiresAt: timestamppb.New(r.ExpiresAt.Time)}
}
