package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Bounds on lists in the status.
const (
	// MaxReferences bounds the bindings that may hold one environment.
	MaxReferences = 64
	// MaxReceipts bounds the replay ring; older operation ids answer as unknown.
	MaxReceipts = 32
	// MaxConditions bounds the conditions list.
	MaxConditions = 16
	// CurrentSchemaVersion is the record version this build writes.
	CurrentSchemaVersion = 1
)

// ExecutionEnvironment is one durable, isolated workspace: a retained PVC plus an executor
// Pod, for one (client, owner, binding).
//
// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=xenv,categories=execplane
// +kubebuilder:printcolumn:name="Binding",type=string,JSONPath=`.spec.bindingID`
// +kubebuilder:printcolumn:name="Profile",type=string,JSONPath=`.spec.profile`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Fence",type=string,JSONPath=`.status.fenceState`
// +kubebuilder:printcolumn:name="Epoch",type=integer,JSONPath=`.status.epoch`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Owner",type=string,JSONPath=`.spec.ownerHash`,priority=1,description="SHA-256 of the owner (owners are never stored in clear)"
type ExecutionEnvironment struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ExecutionEnvironmentSpec   `json:"spec"`
	Status ExecutionEnvironmentStatus `json:"status,omitempty"`
}

// ExecutionEnvironmentSpec is written once at creation and never changes.
//
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable"
type ExecutionEnvironmentSpec struct {
	// SchemaVersion is the record version the environment was created with.
	// +kubebuilder:validation:Minimum=1
	SchemaVersion int32 `json:"schemaVersion"`
	// OwnerHash is the hex SHA-256 of the owner (issuer and subject); owners are never
	// stored in clear.
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{64}$`
	OwnerHash string `json:"ownerHash"`
	// ClientHash is the hex SHA-256 of the creating client's identity.
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{64}$`
	ClientHash string `json:"clientHash"`
	// BindingID is the creating binding.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_:][A-Za-z0-9._:-]*$`
	BindingID string `json:"bindingID"`
	// RequestFingerprint is the hex SHA-256 of the creating Ensure request (client included),
	// so that concurrent identical Ensure calls converge on this object.
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{64}$`
	RequestFingerprint string `json:"requestFingerprint"`
	// Profile names the operator profile the environment is built from.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Profile string `json:"profile"`
	// ProfileDigest is the profile's digest at creation (docs/profiles.md).
	// +kubebuilder:validation:Pattern=`^sha256:[0-9a-f]{64}$`
	ProfileDigest string `json:"profileDigest"`
	// CallerMetadata is the creating caller's metadata (EnsureEnvironment's), returned to
	// it and matched by ListEnvironments; bounded by the API (32 entries, 4 KiB).
	// +optional
	// +kubebuilder:validation:MaxProperties=32
	CallerMetadata map[string]string `json:"callerMetadata,omitempty"`
	// From is the snapshot the workspace starts as (EnsureEnvironment's from_snapshot, a
	// fork); none: an empty workspace.
	// +optional
	From *WorkspaceSource `json:"from,omitempty"`
}

// WorkspaceSource is a snapshot a new workspace is restored from (docs/snapshots.md).
type WorkspaceSource struct {
	// Snapshot is the ExecutionSnapshot's name and SnapshotUID its UID: a snapshot deleted
	// and made again under the same name is another one.
	// +kubebuilder:validation:MaxLength=63
	Snapshot string `json:"snapshot"`
	// +kubebuilder:validation:MaxLength=36
	SnapshotUID string `json:"snapshotUID"`
}

// FenceState reports whether execution authority is proven.
// +kubebuilder:validation:Enum=Healthy;FenceUnknown
type FenceState string

// Fence states.
const (
	FenceHealthy FenceState = "Healthy"
	FenceUnknown FenceState = "FenceUnknown"
)

// ReferenceState is the state of one binding's reference.
// +kubebuilder:validation:Enum=PendingCreate;Published;PendingDelete;ReserveSuccessor
type ReferenceState string

// Reference states.
const (
	ReferencePendingCreate    ReferenceState = "PendingCreate"
	ReferencePublished        ReferenceState = "Published"
	ReferencePendingDelete    ReferenceState = "PendingDelete"
	ReferenceReserveSuccessor ReferenceState = "ReserveSuccessor"
)

// Reference is one binding's hold on the environment.
type Reference struct {
	// BindingID holds the reference.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	BindingID string         `json:"bindingID"`
	State     ReferenceState `json:"state"`
	// SourceBindingID is the binding a ReserveSuccessor reference succeeds.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	SourceBindingID string `json:"sourceBindingID,omitempty"`
	// OperationID last changed the reference.
	// +kubebuilder:validation:MaxLength=128
	OperationID string      `json:"operationID"`
	UpdatedAt   metav1.Time `json:"updatedAt"`
}

// RunClaim is the single claim of execution authority.
type RunClaim struct {
	// +kubebuilder:validation:MaxLength=128
	BindingID string `json:"bindingID"`
	// +kubebuilder:validation:MaxLength=128
	RunID string `json:"runID"`
	// +kubebuilder:validation:MaxLength=64
	ClaimID string `json:"claimID"`
	// +kubebuilder:validation:Minimum=0
	Epoch int64 `json:"epoch"`
	// +kubebuilder:validation:Minimum=0
	GrantGeneration int64 `json:"grantGeneration"`
	// ClientHash is the claiming client, so that expired claims of vanished clients can be
	// told apart from live ones.
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{64}$`
	ClientHash string      `json:"clientHash"`
	AcquiredAt metav1.Time `json:"acquiredAt"`
	ExpiresAt  metav1.Time `json:"expiresAt"`
}

// LifecycleKind is a lifecycle operation: an administrator's (Retire, Replace,
// DeleteRetired), the owner's (Suspend, Resume, Delete) or the controller's policies'
// (Suspend and Retire when idle, Delete when a time limit passed).
// +kubebuilder:validation:Enum=Retire;Replace;DeleteRetired;Suspend;Resume;Delete
type LifecycleKind string

// Lifecycle operations.
const (
	LifecycleRetire        LifecycleKind = "Retire"
	LifecycleReplace       LifecycleKind = "Replace"
	LifecycleDeleteRetired LifecycleKind = "DeleteRetired"
	// LifecycleSuspend stops the executor and keeps the workspace, like Retire, but the
	// owner may undo it: Resume, or Ensure, Attach or AcquireRun on the suspended
	// environment, starts a new executor at epoch + 1.
	LifecycleSuspend LifecycleKind = "Suspend"
	// LifecycleResume starts the executor of a suspended environment.
	LifecycleResume LifecycleKind = "Resume"
	// LifecycleDelete ends the environment: its executor stopped (every command in it
	// ends), its workspace claim deleted. Once completed the resource stays as a tombstone
	// that answers a repeated delete, and is removed after the controller's retention.
	LifecycleDelete LifecycleKind = "Delete"
)

// LifecyclePhase is a step of a lifecycle operation; docs/resource.md lists the phases each
// kind passes through.
// +kubebuilder:validation:Enum=Requested;StoppingExecutor;AwaitingTermination;CreatingExecutor;DeletingWorkspace;DeletingEnvironment;Completed
type LifecyclePhase string

// Lifecycle phases.
const (
	PhaseRequested           LifecyclePhase = "Requested"
	PhaseStoppingExecutor    LifecyclePhase = "StoppingExecutor"
	PhaseAwaitingTermination LifecyclePhase = "AwaitingTermination"
	PhaseCreatingExecutor    LifecyclePhase = "CreatingExecutor"
	PhaseDeletingWorkspace   LifecyclePhase = "DeletingWorkspace"
	PhaseDeletingEnvironment LifecyclePhase = "DeletingEnvironment"
	PhaseCompleted           LifecyclePhase = "Completed"
)

// LifecycleOperation is the administrative operation in progress (or the last completed).
type LifecycleOperation struct {
	Kind  LifecycleKind  `json:"kind"`
	Phase LifecyclePhase `json:"phase"`
	// +kubebuilder:validation:MaxLength=128
	OperationID string `json:"operationID"`
	// ExpectedPodUID and ExpectedPVCUID are the exact objects the operation acts on.
	// +optional
	ExpectedPodUID types.UID `json:"expectedPodUID,omitempty"`
	// +optional
	ExpectedPVCUID types.UID `json:"expectedPVCUID,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Reason    string      `json:"reason,omitempty"`
	StartedAt metav1.Time `json:"startedAt"`
	// +optional
	CompletedAt *metav1.Time `json:"completedAt,omitempty"`
}

// Retention records the owner's request to keep the workspace past the profile's time
// limits, and who set it last.
type Retention struct {
	// Retain keeps the workspace: no time limit deletes it.
	Retain bool `json:"retain"`
	// BindingID set it, under OperationID.
	// +kubebuilder:validation:MaxLength=128
	BindingID string `json:"bindingID"`
	// +kubebuilder:validation:MaxLength=128
	OperationID string      `json:"operationID"`
	UpdatedAt   metav1.Time `json:"updatedAt"`
}

// DeadlineAction is what the controller starts at an owner's deadline.
// +kubebuilder:validation:Enum=Delete;Suspend
type DeadlineAction string

// The deadline actions.
const (
	DeadlineDelete  DeadlineAction = "Delete"
	DeadlineSuspend DeadlineAction = "Suspend"
)

// Deadline is the owner's deadline on an environment, and who set it last.
type Deadline struct {
	// At is when the controller starts Action.
	At     metav1.Time    `json:"at"`
	Action DeadlineAction `json:"action"`
	// BindingID set it, under OperationID.
	// +kubebuilder:validation:MaxLength=128
	BindingID string `json:"bindingID"`
	// +kubebuilder:validation:MaxLength=128
	OperationID string      `json:"operationID"`
	UpdatedAt   metav1.Time `json:"updatedAt"`
}

// TerminationProof records how an executor Pod ended, observed before its finalizer was
// removed.
type TerminationProof struct {
	// +kubebuilder:validation:MaxLength=253
	PodName string    `json:"podName"`
	PodUID  types.UID `json:"podUID"`
	// PodPhase is the terminal phase observed (Succeeded or Failed), or empty when the Pod
	// was deleted while running and its containers were observed stopped.
	// +optional
	PodPhase string `json:"podPhase,omitempty"`
	// +optional
	ExitCode *int32 `json:"exitCode,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Reason     string      `json:"reason,omitempty"`
	ObservedAt metav1.Time `json:"observedAt"`
}

// Replacement records the last completed executor replacement.
type Replacement struct {
	OldPodUID types.UID `json:"oldPodUID"`
	NewPodUID types.UID `json:"newPodUID"`
	// +kubebuilder:validation:Minimum=0
	Epoch       int64       `json:"epoch"`
	CompletedAt metav1.Time `json:"completedAt"`
}

// ObjectIdentity is the exact identity of an object the environment owns or uses.
type ObjectIdentity struct {
	// +kubebuilder:validation:MaxLength=253
	Name string    `json:"name"`
	UID  types.UID `json:"uid"`
}

// Receipt remembers the outcome of one mutating operation for idempotent replay.
type Receipt struct {
	// +kubebuilder:validation:MaxLength=128
	OperationID string `json:"operationID"`
	// Operation is the RPC, such as "AcquireRun".
	// +kubebuilder:validation:MaxLength=64
	Operation string `json:"operation"`
	// ArgumentsHash is the hex SHA-256 of the operation's arguments (caller included): a
	// replay with other arguments is a conflict.
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{64}$`
	ArgumentsHash string `json:"argumentsHash"`
	// The outcome's values that a replay must return.
	// +optional
	Epoch int64 `json:"epoch,omitempty"`
	// +optional
	GrantGeneration int64 `json:"grantGeneration,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=64
	ClaimID string `json:"claimID,omitempty"`
	// Created records that the operation (Ensure) created the environment.
	// +optional
	Created    bool        `json:"created,omitempty"`
	RecordedAt metav1.Time `json:"recordedAt"`
}

// Phase is a printer column summarising the status; code never branches on it.
// +kubebuilder:validation:Enum=Provisioning;Ready;Replacing;Retiring;Retired;Deleting;Degraded;Fenced;Suspending;Suspended;Resuming;Deleted
type Phase string

// Phases.
const (
	PhaseProvisioning Phase = "Provisioning"
	PhaseReady        Phase = "Ready"
	PhaseReplacing    Phase = "Replacing"
	PhaseRetiring     Phase = "Retiring"
	PhaseRetired      Phase = "Retired"
	PhaseDeleting     Phase = "Deleting"
	PhaseDegraded     Phase = "Degraded"
	PhaseFenced       Phase = "Fenced"
	PhaseSuspending   Phase = "Suspending"
	PhaseSuspended    Phase = "Suspended"
	PhaseResuming     Phase = "Resuming"
	PhaseDeleted      Phase = "Deleted"
)

// Condition types, each computed by a pure function of what a reconcile pass observed.
const (
	ConditionReady           = "Ready"
	ConditionWorkspaceBound  = "WorkspaceBound"
	ConditionExecutorReady   = "ExecutorReady"
	ConditionFenced          = "Fenced"
	ConditionDeletionBlocked = "DeletionBlocked"
	ConditionProfileCurrent  = "ProfileCurrent"
)

// ExecutionEnvironmentStatus is the ledger, written only by the controller.
type ExecutionEnvironmentStatus struct {
	// ObservedGeneration is the metadata.generation the status was computed for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Phase summarises the status for people (printer column).
	// +optional
	Phase Phase `json:"phase,omitempty"`
	// Epoch is the fencing token: +1 on every AcquireRun and completed replacement, 0 before
	// the first. It is written even when 0, a value rather than an absence (and the Epoch
	// printer column shows it).
	// +optional
	// +kubebuilder:validation:Minimum=0
	Epoch int64 `json:"epoch"`
	// GrantGeneration is the revocation counter: +1 on every RevokeEnvironment.
	// +optional
	// +kubebuilder:validation:Minimum=0
	GrantGeneration int64 `json:"grantGeneration,omitempty"`
	// AuthorityChangedAt is when the epoch or the grant generation last increased, to the
	// microsecond: every gateway measures how long it took to observe the change (older
	// grants are refused from then on) and exports it as a metric.
	// +optional
	AuthorityChangedAt *metav1.MicroTime `json:"authorityChangedAt,omitempty"`
	// +optional
	FenceState FenceState `json:"fenceState,omitempty"`
	// FenceReason explains a FenceUnknown state.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	FenceReason string `json:"fenceReason,omitempty"`
	// References are the bindings holding the environment, keyed by binding id.
	// +optional
	// +listType=map
	// +listMapKey=bindingID
	// +kubebuilder:validation:MaxItems=64
	References []Reference `json:"references,omitempty"`
	// ActiveRun is the current run claim.
	// +optional
	ActiveRun *RunClaim `json:"activeRun,omitempty"`
	// LastRunActivityAt is when a run claim was last acquired, renewed or released: with
	// the current claim's expiry, the clock of the profile's idle policy
	// (suspendAfterIdle, retireAfterIdle).
	// +optional
	LastRunActivityAt *metav1.Time `json:"lastRunActivityAt,omitempty"`
	// LifecycleOperation is the administrative operation in progress or last completed.
	// +optional
	LifecycleOperation *LifecycleOperation `json:"lifecycleOperation,omitempty"`
	// Retention is the owner's request to keep the workspace: the profile's time limits
	// (retiredTTL, suspendedTTL, maxLifetime) do not delete it while it is set. The owner's
	// DeleteEnvironment and an administrator's DeleteRetiredEnvironment still do.
	// +optional
	Retention *Retention `json:"retention,omitempty"`
	// Deadline is the owner's deadline: at it the controller starts its action, whatever
	// the environment is doing. A Suspend deadline is spent when it fires.
	// +optional
	Deadline *Deadline `json:"deadline,omitempty"`
	// TerminationProof is the last executor termination observed.
	// +optional
	TerminationProof *TerminationProof `json:"terminationProof,omitempty"`
	// LastReplacement is the last completed executor replacement.
	// +optional
	LastReplacement *Replacement `json:"lastReplacement,omitempty"`
	// Pod is the executor Pod; PVC the workspace claim. Once recorded, an object whose UID
	// vanished is never silently recreated.
	// +optional
	Pod *ObjectIdentity `json:"pod,omitempty"`
	// +optional
	PVC *ObjectIdentity `json:"pvc,omitempty"`
	// Receipts is the replay ring of recent mutating operations, newest last.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	Receipts []Receipt `json:"receipts,omitempty"`
	// Conditions are computed on every reconcile pass.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ExecutionEnvironmentList is a list of environments.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type ExecutionEnvironmentList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ExecutionEnvironment `json:"items"`
}
