package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Bounds of a usage ledger (docs/usage.md).
const (
	// MaxUsageWindows bounds the hourly windows one ledger keeps: 35 days. Older windows are
	// folded into nothing but the totals; a billing system exports them before (execctl
	// usage export). At ~150 bytes a window a busy environment's ledger stays under 130 KB.
	MaxUsageWindows = 35 * 24
	// MaxUsagePods bounds the executor Pods whose last counters a ledger remembers: the
	// current one and those replaced recently, whose final samples may still arrive.
	MaxUsagePods = 4
	// MaxUsageSeries bounds the gateway counter series a ledger remembers: one per gateway
	// process that served the environment in the last two hours (replicas and their
	// restarts). A series beyond it is not counted (usage.Ledger.FoldSeries).
	MaxUsageSeries = 64
)

// ExecutionUsage is one environment's usage ledger: what it used, measured from sources its
// workload cannot write (the kubelet's counters of its executor containers, the gateways'
// counts of its API calls), in hourly windows and totals. It has the environment's name and
// namespace, is written by the controller alone, and outlives the environment by the
// retention period, so that a bill can be drawn after a delete.
//
// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=xusage,categories=execplane
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.accrual.state`
// +kubebuilder:printcolumn:name="CPU-ns",type=integer,JSONPath=`.status.totals.cpuNanoseconds`
// +kubebuilder:printcolumn:name="Mem-KiB-s",type=integer,JSONPath=`.status.totals.memoryKiBSeconds`
// +kubebuilder:printcolumn:name="Commands",type=integer,JSONPath=`.status.totals.commands`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ExecutionUsage struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ExecutionUsageSpec   `json:"spec"`
	Status ExecutionUsageStatus `json:"status,omitempty"`
}

// ExecutionUsageSpec names whose usage it is; written once.
//
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable"
type ExecutionUsageSpec struct {
	// Environment is the environment's exact identity.
	Environment ObjectIdentity `json:"environment"`
	// OwnerHash and ClientHash are the environment's (hex SHA-256).
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{64}$`
	OwnerHash string `json:"ownerHash"`
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{64}$`
	ClientHash string `json:"clientHash"`
	// BindingID is the creating binding.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	BindingID string `json:"bindingID"`
	// +kubebuilder:validation:MaxLength=63
	Profile string `json:"profile"`
	// Snapshot, when set, makes this the ledger of a snapshot's storage: Environment is then
	// its source's, and only storage accrues, from the snapshot's beginning until it is
	// deleted or has failed.
	// +optional
	Snapshot *UsageSnapshot `json:"snapshot,omitempty"`
}

// UsageSnapshot names a snapshot whose storage a ledger counts.
type UsageSnapshot struct {
	// Object is the ExecutionSnapshot's identity.
	Object ObjectIdentity `json:"object"`
	// Name is the snapshot's name as its owner gave it.
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
}

// UsageCounters are amounts used over a period. Integrals are in KiB-seconds so that years
// of a large claim fit an int64.
type UsageCounters struct {
	// CPUNanoseconds is CPU time of the executor containers.
	// +optional
	// +kubebuilder:validation:Minimum=0
	CPUNanoseconds int64 `json:"cpuNanoseconds,omitempty"`
	// MemoryKiBSeconds is the containers' working set integrated over time.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MemoryKiBSeconds int64 `json:"memoryKiBSeconds,omitempty"`
	// MemoryPeakBytes is the highest working set sampled.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MemoryPeakBytes int64 `json:"memoryPeakBytes,omitempty"`
	// StorageKiBSeconds is the workspace claim's requested size integrated over the time it
	// existed.
	// +optional
	// +kubebuilder:validation:Minimum=0
	StorageKiBSeconds int64 `json:"storageKiBSeconds,omitempty"`
	// ReadyMilliseconds and SuspendedMilliseconds are the time spent ready and suspended.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ReadyMilliseconds int64 `json:"readyMilliseconds,omitempty"`
	// +optional
	// +kubebuilder:validation:Minimum=0
	SuspendedMilliseconds int64 `json:"suspendedMilliseconds,omitempty"`
	// Commands counts commands started through the API (foreground, detached, terminals).
	// +optional
	// +kubebuilder:validation:Minimum=0
	Commands int64 `json:"commands,omitempty"`
	// BytesIn and BytesOut count bytes moved through the API: files written and command
	// input; files read and command output.
	// +optional
	// +kubebuilder:validation:Minimum=0
	BytesIn int64 `json:"bytesIn,omitempty"`
	// +optional
	// +kubebuilder:validation:Minimum=0
	BytesOut int64 `json:"bytesOut,omitempty"`
}

// UsageWindow is one hour's usage (its start, UTC, on the hour).
type UsageWindow struct {
	Start         metav1.Time `json:"start"`
	UsageCounters `json:",inline"`
}

// UsageState is what an environment accrues time as.
// +kubebuilder:validation:Enum=Ready;Suspended;Other;Ended
type UsageState string

// Usage states.
const (
	UsageReady     UsageState = "Ready"
	UsageSuspended UsageState = "Suspended"
	// UsageOther is any state that is neither (provisioning, replacing, retired, fenced):
	// only storage accrues.
	UsageOther UsageState = "Other"
	// UsageEnded is an environment deleted: nothing accrues any more.
	UsageEnded UsageState = "Ended"
)

// UsageAccrual is what accrues without a write: the environment's state and its claim's
// size since a moment. Readers add what accrued from Since to their now, so that an idle
// suspended environment costs no writes.
type UsageAccrual struct {
	State UsageState `json:"state"`
	// Since is when the folded totals and windows end for time-based counters.
	Since metav1.MicroTime `json:"since"`
	// StorageBytes is the claim's requested size (0: no claim).
	// +optional
	// +kubebuilder:validation:Minimum=0
	StorageBytes int64 `json:"storageBytes,omitempty"`
}

// UsagePod is the last sample of an executor Pod folded into the ledger: a later sample
// adds only its difference, so a sample seen twice (a retry, a new leader) counts once.
type UsagePod struct {
	// +kubebuilder:validation:MaxLength=253
	Name string    `json:"name"`
	UID  types.UID `json:"uid"`
	// CPUNanoseconds is the Pod's cumulative CPU counter at SampledAt.
	// +kubebuilder:validation:Minimum=0
	CPUNanoseconds int64 `json:"cpuNanoseconds"`
	// WorkingSetBytes is its working set at SampledAt.
	// +kubebuilder:validation:Minimum=0
	WorkingSetBytes int64            `json:"workingSetBytes"`
	SampledAt       metav1.MicroTime `json:"sampledAt"`
}

// UsageSeries is the last report of one gateway counter series folded into the ledger.
// Gateways report cumulative counts per series, so a report seen twice counts once.
type UsageSeries struct {
	// +kubebuilder:validation:MaxLength=64
	ID string `json:"id"`
	// +optional
	// +kubebuilder:validation:Minimum=0
	Commands int64 `json:"commands,omitempty"`
	// +optional
	// +kubebuilder:validation:Minimum=0
	BytesIn int64 `json:"bytesIn,omitempty"`
	// +optional
	// +kubebuilder:validation:Minimum=0
	BytesOut   int64       `json:"bytesOut,omitempty"`
	ReportedAt metav1.Time `json:"reportedAt"`
}

// ExecutionUsageStatus is the ledger, written only by the controller.
type ExecutionUsageStatus struct {
	// Totals are all the usage folded so far (windows dropped by retention included).
	// +optional
	Totals UsageCounters `json:"totals,omitempty"`
	// Windows are the hours with usage, oldest first, at most MaxUsageWindows.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=840
	Windows []UsageWindow `json:"windows,omitempty"`
	// Accrual is what accrues from its Since on.
	Accrual UsageAccrual `json:"accrual"`
	// Pods and Series are the sources' last folded values.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=4
	Pods []UsagePod `json:"pods,omitempty"`
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	Series []UsageSeries `json:"series,omitempty"`
	// EndedAt is when the environment was deleted: the ledger is removed once the retention
	// period has passed after it.
	// +optional
	EndedAt *metav1.Time `json:"endedAt,omitempty"`
}

// ExecutionUsageList is a list of usage ledgers.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type ExecutionUsageList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ExecutionUsage `json:"items"`
}
