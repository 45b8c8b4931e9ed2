package profile

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DefaultHelperPath is where the helper binary lives inside an executor image when a profile
// does not say otherwise. It matches the gateway's --helper-path default.
const DefaultHelperPath = "/execplane/helper"

// DefaultWorkspacePath is where the workspace is mounted in the executor when a profile does
// not say otherwise: the container's working directory and HOME.
const DefaultWorkspacePath = "/workspace"

// CapabilityNetworkEgress lets executor Pods built from a profile open outbound connections;
// without it the executor NetworkPolicy denies all egress.
const CapabilityNetworkEgress = "network-egress"

// ProfileSpec is one operator-defined profile: what an executor Pod and its workspace are
// built from, and the bounds the data plane enforces.
//
// The YAML file is decoded through sigs.k8s.io/yaml semantics (YAML to JSON, then JSON into
// this struct), so the json tags are the YAML keys. Optional fields are pointers, empty
// strings or empty collections; absent and empty mean the same thing everywhere, including
// the digest. docs/profiles.md lists every field with its bounds.
type ProfileSpec struct {
	// Image is the executor container image (required). With
	// ParseOptions.RequireDigestPinnedImages it must end in @sha256:<64 hex>.
	Image string `json:"image"`
	// StorageClass names the workspace PVC's StorageClass; empty means the cluster default.
	StorageClass string `json:"storageClass,omitempty"`
	// StorageSize is the workspace PVC's requested size (required).
	StorageSize *resource.Quantity `json:"storageSize,omitempty"`

	// CPURequest is the executor container's CPU request (optional, whole millicores, at
	// most CPULimit when both are set).
	CPURequest *resource.Quantity `json:"cpuRequest,omitempty"`
	// CPULimit is the executor container's CPU limit (optional, whole millicores).
	CPULimit *resource.Quantity `json:"cpuLimit,omitempty"`
	// MemoryRequest is the executor container's memory request (optional, whole bytes, at
	// most MemoryLimit).
	MemoryRequest *resource.Quantity `json:"memoryRequest,omitempty"`
	// MemoryLimit is the executor container's memory limit (required, whole bytes): memory
	// cannot be reclaimed from a workload the way CPU time can.
	MemoryLimit *resource.Quantity `json:"memoryLimit,omitempty"`
	// EphemeralStorageRequest is the executor container's ephemeral-storage request
	// (optional, whole bytes, at most EphemeralStorageLimit when both are set).
	EphemeralStorageRequest *resource.Quantity `json:"ephemeralStorageRequest,omitempty"`
	// EphemeralStorageLimit is the executor container's ephemeral-storage limit (optional,
	// whole bytes).
	EphemeralStorageLimit *resource.Quantity `json:"ephemeralStorageLimit,omitempty"`
	// TmpSizeLimit is the size of the memory-backed emptyDir (a tmpfs) mounted at /tmp
	// (required, whole bytes, at most MemoryLimit: its pages are the container's memory).
	TmpSizeLimit *resource.Quantity `json:"tmpSizeLimit,omitempty"`

	// RuntimeClassName selects a RuntimeClass (for example gVisor or Kata); empty means the
	// cluster default.
	RuntimeClassName string `json:"runtimeClassName,omitempty"`
	// ImagePullSecrets names Secrets in the environments' namespace, in the order the
	// executor Pod lists them.
	ImagePullSecrets []string `json:"imagePullSecrets,omitempty"`
	// NodeSelector constrains executor Pods to matching Nodes.
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// Tolerations are copied to executor Pods in this order.
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// MaxFileBytes is the largest file a single read or write moves (required).
	MaxFileBytes int64 `json:"maxFileBytes"`
	// MaxCommandBytes is the most output kept per stream of a command, and the most stdin a
	// command accepts (required).
	MaxCommandBytes int64 `json:"maxCommandBytes"`
	// MaxCommandDuration is the longest a command may run, written as a Go duration string
	// such as "10m" (required).
	MaxCommandDuration metav1.Duration `json:"maxCommandDuration"`
	// MaxEnvironments is the most environments that may exist for this profile (required).
	MaxEnvironments int64 `json:"maxEnvironments"`

	// HelperPath is the helper binary's absolute path inside the image; empty means
	// DefaultHelperPath. A loaded registry always holds the effective value.
	HelperPath string `json:"helperPath,omitempty"`
	// HelperImage, when set, is an image carrying the helper at DefaultHelperPath: an init
	// container copies it into a volume the executor container mounts at the helper's
	// directory, so any executor image works without the helper baked in. HelperPath must
	// then be DefaultHelperPath (or empty).
	HelperImage string `json:"helperImage,omitempty"`
	// WorkspacePath is where the workspace is mounted in the executor container, which is
	// also its working directory and HOME; empty means DefaultWorkspacePath. E2B's programs
	// expect /home/user (docs/e2b.md). The helper resolves every path beneath it.
	WorkspacePath string `json:"workspacePath,omitempty"`
	// Capabilities the profile grants, such as CapabilityNetworkEgress. A loaded registry
	// holds them sorted.
	Capabilities []string `json:"capabilities,omitempty"`
	// Commands bounds durable commands (docs/commands.md); absent means the defaults.
	Commands *CommandsSpec `json:"commands,omitempty"`

	// SuspendAfterIdle suspends a Ready environment whose run claim has been released or
	// expired (or that was never claimed since it became Ready) for this long; absent means
	// never. Not part of the digest, like RetireAfterIdle: the idle policy is applied to
	// environments, it is not what their executors are built from, so changing it never
	// leaves an environment with a "changed" profile.
	SuspendAfterIdle *metav1.Duration `json:"suspendAfterIdle,omitempty"`
	// RetireAfterIdle retires a Ready or suspended environment idle for this long (the
	// workspace is kept; only an administrator revives it); absent means never. When both
	// are set it is longer than SuspendAfterIdle.
	RetireAfterIdle *metav1.Duration `json:"retireAfterIdle,omitempty"`
	// RetiredTTL deletes the workspace of an environment retired for this long,
	// SuspendedTTL that of one suspended for this long, and MaxLifetime any environment
	// this long after its creation, whatever its state (docs/profiles.md#time-limits). The
	// owner's retention (SetEnvironmentRetention) keeps a workspace from all three. Absent
	// or 0 means never. Not part of the digest: policies applied to environments.
	RetiredTTL   *metav1.Duration `json:"retiredTTL,omitempty"`
	SuspendedTTL *metav1.Duration `json:"suspendedTTL,omitempty"`
	MaxLifetime  *metav1.Duration `json:"maxLifetime,omitempty"`
	// WarmPool keeps ready, unbound executor Pod and workspace claim pairs that Ensure
	// adopts instead of creating (docs/controller.md#warm-pools); absent means none. Not
	// part of the digest: it is how many executors wait, not what they are built from.
	WarmPool *WarmPoolSpec `json:"warmPool,omitempty"`
	// Snapshots says how the profile's workspaces are snapshotted and forked
	// (docs/snapshots.md); absent means by copy with the defaults. Not part of the digest:
	// how a workspace is copied, not what its executor is built from.
	Snapshots *SnapshotsSpec `json:"snapshots,omitempty"`
}

// Snapshot methods (SnapshotsSpec.Method).
const (
	// SnapshotCSI takes a VolumeSnapshot of the workspace claim and restores a claim from it.
	SnapshotCSI = "csi"
	// SnapshotCopy copies the workspace into a claim of its own with a copy Pod.
	SnapshotCopy = "copy"
)

// SnapshotsSpec is a profile's snapshot policy. Every field is optional.
type SnapshotsSpec struct {
	// Method is SnapshotCSI or SnapshotCopy; empty: csi when VolumeSnapshotClassName is
	// set, else copy.
	Method string `json:"method,omitempty"`
	// VolumeSnapshotClassName is the VolumeSnapshotClass of csi snapshots; its driver must
	// be the storage class's. Required by the csi method.
	VolumeSnapshotClassName string `json:"volumeSnapshotClassName,omitempty"`
	// MaxQuiesce bounds how long a snapshot keeps the environment's processes stopped
	// while it is cut (a copy's whole time); DefaultMaxQuiesce when absent.
	MaxQuiesce *metav1.Duration `json:"maxQuiesce,omitempty"`
	// MaxCopyDuration bounds a restore's copy Pod; DefaultMaxCopyDuration when absent.
	MaxCopyDuration *metav1.Duration `json:"maxCopyDuration,omitempty"`
}

// Defaults and bounds of the snapshot policy.
const (
	DefaultMaxQuiesce      = 2 * time.Minute
	DefaultMaxCopyDuration = time.Hour
	minMaxQuiesce          = time.Second
	maxMaxQuiesce          = 30 * time.Minute
	minMaxCopyDuration     = 10 * time.Second
	maxMaxCopyDuration     = 24 * time.Hour
)

// SnapshotMethod is the profile's effective method: SnapshotCSI or SnapshotCopy.
func (s *ProfileSpec) SnapshotMethod() string {
	switch {
	case s.Snapshots == nil:
		return SnapshotCopy
	case s.Snapshots.Method != "":
		return s.Snapshots.Method
	case s.Snapshots.VolumeSnapshotClassName != "":
		return SnapshotCSI
	}
	return SnapshotCopy
}

// SnapshotBounds are the profile's effective quiesce and copy bounds.
func (s *ProfileSpec) SnapshotBounds() (maxQuiesce, maxCopy time.Duration) {
	maxQuiesce, maxCopy = DefaultMaxQuiesce, DefaultMaxCopyDuration
	if sn := s.Snapshots; sn != nil {
		if sn.MaxQuiesce != nil {
			maxQuiesce = sn.MaxQuiesce.Duration
		}
		if sn.MaxCopyDuration != nil {
			maxCopy = sn.MaxCopyDuration.Duration
		}
	}
	return maxQuiesce, maxCopy
}

// WarmPoolSpec sizes a profile's warm pool.
type WarmPoolSpec struct {
	// Size is how many ready pairs the controller keeps (0 .. MaxWarmPoolCeiling, at most
	// maxEnvironments).
	Size int64 `json:"size"`
}

// CommandsSpec bounds a profile's durable commands. Every field is optional: an absent one
// takes its default (DefaultCommands).
type CommandsSpec struct {
	// MaxDetached is the most durable commands running at once in one environment.
	MaxDetached int64 `json:"maxDetached,omitempty"`
	// SpoolBytes caps each output stream's spool on the workspace volume, head and tail
	// kept.
	SpoolBytes int64 `json:"spoolBytes,omitempty"`
	// MaxDuration is the longest a durable command may run.
	MaxDuration *metav1.Duration `json:"maxDuration,omitempty"`
	// RetainRecords is the most ended commands' records kept per environment.
	RetainRecords int64 `json:"retainRecords,omitempty"`
	// RetainFor is how long an ended command's record is kept.
	RetainFor *metav1.Duration `json:"retainFor,omitempty"`
}

// DeepCopy returns a copy of s that shares no memory with it. resource.Quantity caches its
// string form on first use, so even reading a shared *Quantity can write; copies keep the
// registry's own values untouched.
func (s *ProfileSpec) DeepCopy() ProfileSpec {
	out := *s
	out.StorageSize = copyQuantity(s.StorageSize)
	out.CPURequest = copyQuantity(s.CPURequest)
	out.CPULimit = copyQuantity(s.CPULimit)
	out.MemoryRequest = copyQuantity(s.MemoryRequest)
	out.MemoryLimit = copyQuantity(s.MemoryLimit)
	out.EphemeralStorageRequest = copyQuantity(s.EphemeralStorageRequest)
	out.EphemeralStorageLimit = copyQuantity(s.EphemeralStorageLimit)
	out.TmpSizeLimit = copyQuantity(s.TmpSizeLimit)
	if s.ImagePullSecrets != nil {
		out.ImagePullSecrets = append([]string(nil), s.ImagePullSecrets...)
	}
	if s.NodeSelector != nil {
		out.NodeSelector = make(map[string]string, len(s.NodeSelector))
		for k, v := range s.NodeSelector {
			out.NodeSelector[k] = v
		}
	}
	if s.Tolerations != nil {
		out.Tolerations = make([]corev1.Toleration, len(s.Tolerations))
		for i := range s.Tolerations {
			s.Tolerations[i].DeepCopyInto(&out.Tolerations[i])
		}
	}
	if s.Commands != nil {
		c := *s.Commands
		if c.MaxDuration != nil {
			d := *c.MaxDuration
			c.MaxDuration = &d
		}
		if c.RetainFor != nil {
			d := *c.RetainFor
			c.RetainFor = &d
		}
		out.Commands = &c
	}
	if s.Capabilities != nil {
		out.Capabilities = append([]string(nil), s.Capabilities...)
	}
	out.SuspendAfterIdle = copyDuration(s.SuspendAfterIdle)
	out.RetireAfterIdle = copyDuration(s.RetireAfterIdle)
	out.RetiredTTL = copyDuration(s.RetiredTTL)
	out.SuspendedTTL = copyDuration(s.SuspendedTTL)
	out.MaxLifetime = copyDuration(s.MaxLifetime)
	if s.WarmPool != nil {
		w := *s.WarmPool
		out.WarmPool = &w
	}
	if s.Snapshots != nil {
		sn := *s.Snapshots
		sn.MaxQuiesce = copyDuration(sn.MaxQuiesce)
		sn.MaxCopyDuration = copyDuration(sn.MaxCopyDuration)
		out.Snapshots = &sn
	}
	return out
}

// PoolSize is the warm pool's size: 0 when the profile has none.
func (s *ProfileSpec) PoolSize() int64 {
	if s.WarmPool == nil {
		return 0
	}
	return s.WarmPool.Size
}

func copyDuration(d *metav1.Duration) *metav1.Duration {
	if d == nil {
		return nil
	}
	c := *d
	return &c
}

func copyQuantity(q *resource.Quantity) *resource.Quantity {
	if q == nil {
		return nil
	}
	c := q.DeepCopy()
	return &c
}
