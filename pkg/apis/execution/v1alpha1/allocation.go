package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Bounds of an allocation.
const (
	// MaxAllocated bounds the environments, and the detached commands, one allocation lists
	// (quota.MaxEnvironments): ~100 bytes each keeps the object under 1 MiB.
	MaxAllocated = 5000
)

// AllocationScope is whose allocation it is.
// +kubebuilder:validation:Enum=Client;Owner
type AllocationScope string

// Allocation scopes.
const (
	AllocationClient AllocationScope = "Client"
	// AllocationOwner is an owner of one client.
	AllocationOwner AllocationScope = "Owner"
)

// ExecutionAllocation is what one quota scope (a client, or an owner of a client) holds:
// the environments admitted under its quotas and its running detached commands. Admission
// is a compare-and-swap of this object, so two admissions for its last slot — through any
// gateways, under any leader — cannot both pass. Written by the controller alone.
//
// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=xalloc,categories=execplane
// +kubebuilder:printcolumn:name="Scope",type=string,JSONPath=`.spec.scope`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ExecutionAllocation struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ExecutionAllocationSpec   `json:"spec"`
	Status ExecutionAllocationStatus `json:"status,omitempty"`
}

// ExecutionAllocationSpec names the scope; written once.
//
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable"
type ExecutionAllocationSpec struct {
	Scope AllocationScope `json:"scope"`
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{64}$`
	ClientHash string `json:"clientHash"`
	// OwnerHash is set for an owner scope.
	// +optional
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{64}$`
	OwnerHash string `json:"ownerHash,omitempty"`
}

// AllocatedEnvironment is an environment counted against the scope's quotas.
type AllocatedEnvironment struct {
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// Ready: counted against readyEnvironments (not suspended).
	// +optional
	Ready bool `json:"ready,omitempty"`
	// StorageBytes is its claim's requested size.
	// +optional
	// +kubebuilder:validation:Minimum=0
	StorageBytes int64       `json:"storageBytes,omitempty"`
	AdmittedAt   metav1.Time `json:"admittedAt"`
}

// AllocatedSnapshot is a snapshot whose storage is counted against the scope's storage
// quota: from its beginning until it is deleted or failed.
type AllocatedSnapshot struct {
	// Name is its storage's (the VolumeSnapshot's or the claim's: xsnap-<owner key>-<id>,
	// never reused, unlike the snapshot's own name).
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// StorageBytes is what it keeps: its source claim's requested size.
	// +optional
	// +kubebuilder:validation:Minimum=0
	StorageBytes int64       `json:"storageBytes,omitempty"`
	AdmittedAt   metav1.Time `json:"admittedAt"`
}

// AllocatedCommand is a running detached command counted against the scope.
type AllocatedCommand struct {
	// +kubebuilder:validation:MaxLength=63
	Environment string `json:"environment"`
	// +kubebuilder:validation:MaxLength=128
	CommandID string `json:"commandID"`
	// Until is when the slot is given back if nobody saw the command end first (its
	// profile's longest command duration after its start).
	Until metav1.Time `json:"until"`
}

// ExecutionAllocationStatus is the scope's holdings.
type ExecutionAllocationStatus struct {
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=5000
	Environments []AllocatedEnvironment `json:"environments,omitempty"`
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=5000
	Commands []AllocatedCommand `json:"commands,omitempty"`
	// Snapshots are the scope's snapshots, their storage counted with the environments'.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=5000
	Snapshots []AllocatedSnapshot `json:"snapshots,omitempty"`
}

// ExecutionAllocationList is a list of allocations.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type ExecutionAllocationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ExecutionAllocation `json:"items"`
}
