package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Bounds of a snapshot.
const (
	// MaxSnapshotCommands bounds the durable commands one snapshot records as of its cut
	// (the helper keeps at most this many running records per workspace anyway).
	MaxSnapshotCommands = 64
)

// SnapshotMethod is how a snapshot's state is stored (docs/snapshots.md).
// +kubebuilder:validation:Enum=CSI;Copy
type SnapshotMethod string

// Snapshot methods.
const (
	// SnapshotCSI stores a VolumeSnapshot of the workspace claim.
	SnapshotCSI SnapshotMethod = "CSI"
	// SnapshotCopy stores a claim of its own, filled by a copy Pod.
	SnapshotCopy SnapshotMethod = "Copy"
)

// SnapshotPhase is where a snapshot is in its life.
// +kubebuilder:validation:Enum=Pending;Cutting;Ready;Failed;Deleting
type SnapshotPhase string

// Snapshot phases.
const (
	// SnapshotPending: recorded, the cut not begun (the source being quiesced). A new
	// snapshot's status is empty, which means the same.
	SnapshotPending SnapshotPhase = "Pending"
	// SnapshotCutting: the VolumeSnapshot or the copy is being made.
	SnapshotCutting SnapshotPhase = "Cutting"
	// SnapshotReady: the state is fixed and restorable (CutAt set; for CSI, readyToUse).
	SnapshotReady SnapshotPhase = "Ready"
	// SnapshotFailed: no state was kept (Failure says why); deleting it frees its name.
	SnapshotFailed SnapshotPhase = "Failed"
	// SnapshotDeleting: its storage is being removed.
	SnapshotDeleting SnapshotPhase = "Deleting"
)

// ExecutionSnapshot is a caller's snapshot of one environment's workspace: a VolumeSnapshot
// or a copy in a claim of its own, restorable into new environments (Ensure from it, or a
// fork). It belongs to the environment's owner and outlives the environment. Written by the
// controller leader alone; named `xsnap-` + a hash of client, owner and the caller's name.
//
// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=xsnap,categories=execplane
// +kubebuilder:printcolumn:name="Method",type=string,JSONPath=`.spec.method`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Source",type=string,JSONPath=`.spec.source.environment`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ExecutionSnapshot struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ExecutionSnapshotSpec   `json:"spec"`
	Status ExecutionSnapshotStatus `json:"status,omitempty"`
}

// ExecutionSnapshotSpec is what the snapshot is of and whose; written once.
//
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable"
type ExecutionSnapshotSpec struct {
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{64}$`
	ClientHash string `json:"clientHash"`
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{64}$`
	OwnerHash string `json:"ownerHash"`
	// OwnerKey is the short owner key its storage's name and the claims restored from it
	// carry, for admission (docs/snapshots.md "Names, owners and admission").
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{16}$`
	OwnerKey string `json:"ownerKey"`
	// Name is the caller's name for it, unique per owner.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`
	// OperationID is the creating request's, so that a retry answers with this snapshot.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	OperationID string          `json:"operationID"`
	Source      SnapshotSource  `json:"source"`
	Method      SnapshotMethod  `json:"method"`
	Storage     SnapshotStorage `json:"storage"`
}

// SnapshotSource is the environment incarnation the snapshot was taken from.
type SnapshotSource struct {
	// +kubebuilder:validation:MaxLength=63
	Environment string `json:"environment"`
	// +kubebuilder:validation:MaxLength=36
	UID string `json:"uid"`
	// +kubebuilder:validation:MaxLength=128
	BindingID string `json:"bindingID"`
	// Profile the source was built from; a restore builds from the profile the restoring
	// request names.
	// +kubebuilder:validation:MaxLength=63
	Profile string `json:"profile"`
	// Epoch and PodUID are the source's executor when the snapshot was requested: the cut
	// is fenced by them (zero and empty for a suspended source).
	// +optional
	// +kubebuilder:validation:Minimum=0
	Epoch int64 `json:"epoch,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=36
	PodUID string `json:"podUID,omitempty"`
}

// SnapshotStorage is where the snapshot's state is kept, in the executor namespace.
type SnapshotStorage struct {
	// Name of the VolumeSnapshot (CSI) or the claim (Copy): `xsnap-<ownerKey>-<id>`.
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// SourceClaim is the workspace claim it was cut from.
	// +kubebuilder:validation:MaxLength=253
	SourceClaim string `json:"sourceClaim"`
	// StorageClass of the source claim; a copy's claim uses it too.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	StorageClass string `json:"storageClass,omitempty"`
	// VolumeSnapshotClass, for CSI.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	VolumeSnapshotClass string `json:"volumeSnapshotClass,omitempty"`
	// Bytes is the source claim's requested size: what a restore requests at least.
	// +kubebuilder:validation:Minimum=1
	Bytes int64 `json:"bytes"`
}

// SnapshotCommand is a durable command of the source as of the cut (its state then; a
// restore runs none of them).
type SnapshotCommand struct {
	// +kubebuilder:validation:MaxLength=128
	ID string `json:"id"`
	// State is the command's state as its record said (RUNNING, EXITED, ...).
	// +kubebuilder:validation:MaxLength=32
	State string `json:"state"`
	// +optional
	ExitCode *int32 `json:"exitCode,omitempty"`
}

// SnapshotFailure says why a snapshot holds no state.
type SnapshotFailure struct {
	// Reason is an error reason of the API (pkg/apierror), e.g. DEADLINE_EXCEEDED.
	// +kubebuilder:validation:MaxLength=64
	Reason string `json:"reason"`
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message"`
}

// CopyProgress is a copy Pod's progress, from its termination message (untrusted: counters
// only, bounded).
type CopyProgress struct {
	// Attempts is how many copy Pods ran.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Attempts int32 `json:"attempts,omitempty"`
	// +optional
	// +kubebuilder:validation:Minimum=0
	Entries int64 `json:"entries,omitempty"`
	// +optional
	// +kubebuilder:validation:Minimum=0
	Bytes int64 `json:"bytes,omitempty"`
}

// ExecutionSnapshotStatus is the snapshot's state, written by the controller leader.
type ExecutionSnapshotStatus struct {
	// +optional
	Phase SnapshotPhase `json:"phase,omitempty"`
	// CutBy is when the cut must be done, set as it begins: the source's quiesce ends by
	// then, and a copy that finished later is not a state the source passed through.
	// +optional
	CutBy *metav1.Time `json:"cutBy,omitempty"`
	// CutAt is when the state was fixed; ReadyAt when it became restorable.
	// +optional
	CutAt *metav1.Time `json:"cutAt,omitempty"`
	// +optional
	ReadyAt *metav1.Time `json:"readyAt,omitempty"`
	// RestoreBytes is the size a restore needs (the VolumeSnapshot's restoreSize, or the
	// copy's claim's).
	// +optional
	// +kubebuilder:validation:Minimum=0
	RestoreBytes int64 `json:"restoreBytes,omitempty"`
	// Commands are the source's durable commands as of the cut.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	Commands []SnapshotCommand `json:"commands,omitempty"`
	// +optional
	Copy *CopyProgress `json:"copy,omitempty"`
	// +optional
	Failure *SnapshotFailure `json:"failure,omitempty"`
}

// ExecutionSnapshotList is a list of snapshots.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type ExecutionSnapshotList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ExecutionSnapshot `json:"items"`
}
