package profile

import (
	"fmt"
	"math"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/execplane/execplane/pkg/problem"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Bounds on the data-plane limits a profile sets. Values outside them are refused.
const (
	// minMaxFileBytes: a profile that cannot move a 1 KiB file is a typo, not a policy.
	minMaxFileBytes = 1 << 10
	// MaxFileBytesCeiling bounds maxFileBytes: file content travels in a single gRPC
	// message, and the gateway's default message cap is 32 MiB; 24 MiB leaves room for the
	// rest of the message (path, versions, metadata) under that cap.
	MaxFileBytesCeiling = 24 << 20
	// minMaxCommandBytes: less than 1 KiB per stream would truncate even an error message.
	minMaxCommandBytes = 1 << 10
	// MaxCommandBytesCeiling bounds maxCommandBytes per stream: stdout and stderr (8 MiB
	// each) come back in one response and stdin goes out in one request, all under the
	// gateway's 32 MiB message cap.
	MaxCommandBytesCeiling = 8 << 20
	// minMaxCommandDuration: a command must be able to start at all.
	minMaxCommandDuration = time.Second
	// MaxCommandDurationCeiling bounds maxCommandDuration: commands are foreground, so the
	// call lasts as long as the command and must end within the gateway's default RPC
	// deadline cap (one hour).
	MaxCommandDurationCeiling = time.Hour
	// MaxDetachedCeiling bounds commands.maxDetached: each running durable command is a
	// supervisor process of a few MiB in the executor (the helper's own ceiling).
	MaxDetachedCeiling = 64
	// minSpoolBytes and MaxSpoolBytesCeiling bound commands.spoolBytes per stream: at least
	// a page of output, at most the helper's ceiling (a small share of any volume worth
	// having).
	minSpoolBytes        = 4 << 10
	MaxSpoolBytesCeiling = 1 << 30
	// MaxDetachedDurationCeiling bounds commands.maxDuration (the helper's ceiling).
	MaxDetachedDurationCeiling = 7 * 24 * time.Hour
	// minIdleAfter and maxIdleAfter bound suspendAfterIdle and retireAfterIdle: shorter
	// than a run claim's shortest TTL would suspend an environment between two turns of an
	// agent that is still there; a year is "never" said differently.
	minIdleAfter = 30 * time.Second
	maxIdleAfter = 8760 * time.Hour
	// minTimeLimit and maxTimeLimit bound retiredTTL, suspendedTTL and maxLifetime (0 is
	// "never"): no floor beyond the controller's clock granularity, since deleting is what
	// the operator asked for; a year is "never" said differently.
	minTimeLimit = time.Second
	maxTimeLimit = 8760 * time.Hour
	// MaxRetainRecordsCeiling bounds commands.retainRecords: a listing reads them all.
	MaxRetainRecordsCeiling = 1000
	// minRetainFor and maxRetainFor bound commands.retainFor.
	minRetainFor = time.Minute
	maxRetainFor = 365 * 24 * time.Hour
	// MaxWarmPoolCeiling bounds warmPool.size: every member is a running Pod holding its
	// requests and a provisioned volume, paid for while nobody uses it.
	MaxWarmPoolCeiling = 5000
	// MaxEnvironmentsCeiling bounds maxEnvironments: every environment is a custom resource,
	// a PVC and a Pod held in the informer caches of every gateway and controller replica.
	MaxEnvironmentsCeiling = 100_000
	// MaxCapabilities bounds the capabilities list, as the public Profile message does.
	MaxCapabilities = 32
	// maxHelperPathBytes is Linux PATH_MAX less the terminating NUL: exec refuses longer paths.
	maxHelperPathBytes = 4095
	// maxTolerationSeconds keeps tolerationSeconds an exact integer in every JSON
	// implementation (IEEE doubles hold integers up to 2^53-1 exactly), so the canonical
	// encoding stays reproducible; it is about 285 million years.
	maxTolerationSeconds = 1<<53 - 1
)

// tmpMountPath is the executor's temporary folder (DESIGN §5). The helper may not live under
// it nor under the workspace (workspacePath): both are writable by the workload, which could
// replace the binary the gateway executes, and the workspace is an empty volume on first use.
const tmpMountPath = "/tmp"

// Quantity bounds: Kubernetes accounts bytes as int64 and CPU as int64 millicores, so larger
// values would overflow in the scheduler and the kubelet.
var (
	maxByteQuantity = *resource.NewQuantity(math.MaxInt64, resource.DecimalSI)
	maxCPUQuantity  = *resource.NewMilliQuantity(math.MaxInt64, resource.DecimalSI)
)

// Approximate magnitudes checked before exact comparisons. They sit just outside the exact
// bounds, so the exact comparison still decides near a bound; they only keep arbitrary-
// precision arithmetic away from absurd exponents.
const (
	approxMaxBytes = 9.3e18
	approxMaxCPU   = 9.3e15
)

type quantityKind int

const (
	byteQuantity quantityKind = iota // whole bytes
	cpuQuantity                      // whole millicores
)

// normalize fills defaults and puts order-insensitive lists in their canonical order, so
// that the digest and the registry see the effective spec. It runs after validation, whose
// paths index lists in the operator's order.
func normalize(s *ProfileSpec) {
	if s.HelperPath == "" {
		s.HelperPath = DefaultHelperPath
	}
	if s.WorkspacePath == "" {
		s.WorkspacePath = DefaultWorkspacePath
	}
	if len(s.Capabilities) > 0 {
		sort.Strings(s.Capabilities)
	}
}

// validateSpec records every problem of the spec s of the profile at path, as written (an
// empty helperPath stands for DefaultHelperPath).
func validateSpec(p *problem.List, path string, s *ProfileSpec, o ParseOptions) {
	field := func(name string) string { return path + "." + name }

	checkImage(p, field("image"), s.Image, o.RequireDigestPinnedImages)
	if s.StorageClass != "" {
		addAll(p, field("storageClass"), s.StorageClass, validation.IsDNS1123Subdomain(s.StorageClass))
	}
	checkQuantity(p, field("storageSize"), s.StorageSize, byteQuantity, true)

	cpuReq := checkQuantity(p, field("cpuRequest"), s.CPURequest, cpuQuantity, false)
	cpuLim := checkQuantity(p, field("cpuLimit"), s.CPULimit, cpuQuantity, false)
	memReq := checkQuantity(p, field("memoryRequest"), s.MemoryRequest, byteQuantity, false)
	memLim := checkQuantity(p, field("memoryLimit"), s.MemoryLimit, byteQuantity, true)
	ephReq := checkQuantity(p, field("ephemeralStorageRequest"), s.EphemeralStorageRequest, byteQuantity, false)
	ephLim := checkQuantity(p, field("ephemeralStorageLimit"), s.EphemeralStorageLimit, byteQuantity, false)
	tmp := checkQuantity(p, field("tmpSizeLimit"), s.TmpSizeLimit, byteQuantity, true)
	checkAtMost(p, field("cpuRequest"), s.CPURequest, cpuReq && cpuLim, "cpuLimit", s.CPULimit)
	checkAtMost(p, field("memoryRequest"), s.MemoryRequest, memReq && memLim, "memoryLimit", s.MemoryLimit)
	checkAtMost(p, field("ephemeralStorageRequest"), s.EphemeralStorageRequest, ephReq && ephLim,
		"ephemeralStorageLimit", s.EphemeralStorageLimit)
	// /tmp is a tmpfs (internal/executor): its pages are the container's memory.
	checkAtMost(p, field("tmpSizeLimit"), s.TmpSizeLimit, tmp && memLim, "memoryLimit", s.MemoryLimit)

	if s.RuntimeClassName != "" {
		addAll(p, field("runtimeClassName"), s.RuntimeClassName, validation.IsDNS1123Subdomain(s.RuntimeClassName))
	}
	checkNames(p, field("imagePullSecrets"), s.ImagePullSecrets, validation.IsDNS1123Subdomain)
	checkNodeSelector(p, field("nodeSelector"), s.NodeSelector)
	for i := range s.Tolerations {
		checkToleration(p, fmt.Sprintf("%s[%d]", field("tolerations"), i), &s.Tolerations[i])
	}

	checkBetween(p, field("maxFileBytes"), s.MaxFileBytes, minMaxFileBytes, MaxFileBytesCeiling)
	checkBetween(p, field("maxCommandBytes"), s.MaxCommandBytes, minMaxCommandBytes, MaxCommandBytesCeiling)
	if d := s.MaxCommandDuration.Duration; d < minMaxCommandDuration || d > MaxCommandDurationCeiling {
		p.Add(field("maxCommandDuration"), "%s is outside [%s, %s]", d, minMaxCommandDuration, MaxCommandDurationCeiling)
	}
	checkBetween(p, field("maxEnvironments"), s.MaxEnvironments, 1, MaxEnvironmentsCeiling)
	if w := s.WarmPool; w != nil {
		checkBetween(p, field("warmPool.size"), w.Size, 0, min(MaxWarmPoolCeiling, max(s.MaxEnvironments, 0)))
	}
	if sn := s.Snapshots; sn != nil {
		sub := func(name string) string { return field("snapshots." + name) }
		switch sn.Method {
		case "", SnapshotCopy:
		case SnapshotCSI:
			if sn.VolumeSnapshotClassName == "" {
				p.Add(sub("volumeSnapshotClassName"), "is required by the csi method")
			}
		default:
			p.Add(sub("method"), "%q is not %q or %q", sn.Method, SnapshotCSI, SnapshotCopy)
		}
		if sn.VolumeSnapshotClassName != "" {
			addAll(p, sub("volumeSnapshotClassName"), sn.VolumeSnapshotClassName, validation.IsDNS1123Subdomain(sn.VolumeSnapshotClassName))
		}
		if d := sn.MaxQuiesce; d != nil && (d.Duration < minMaxQuiesce || d.Duration > maxMaxQuiesce) {
			p.Add(sub("maxQuiesce"), "%s is outside [%s, %s]", d.Duration, minMaxQuiesce, maxMaxQuiesce)
		}
		if d := sn.MaxCopyDuration; d != nil && (d.Duration < minMaxCopyDuration || d.Duration > maxMaxCopyDuration) {
			p.Add(sub("maxCopyDuration"), "%s is outside [%s, %s]", d.Duration, minMaxCopyDuration, maxMaxCopyDuration)
		}
	}
	if c := s.Commands; c != nil {
		sub := func(name string) string { return field("commands." + name) }
		if c.MaxDetached != 0 {
			checkBetween(p, sub("maxDetached"), c.MaxDetached, 1, MaxDetachedCeiling)
		}
		if c.SpoolBytes != 0 {
			checkBetween(p, sub("spoolBytes"), c.SpoolBytes, minSpoolBytes, MaxSpoolBytesCeiling)
		}
		if c.RetainRecords != 0 {
			checkBetween(p, sub("retainRecords"), c.RetainRecords, 1, MaxRetainRecordsCeiling)
		}
		if c.MaxDuration != nil {
			if d := c.MaxDuration.Duration; d < minMaxCommandDuration || d > MaxDetachedDurationCeiling {
				p.Add(sub("maxDuration"), "%s is outside [%s, %s]", d, minMaxCommandDuration, MaxDetachedDurationCeiling)
			}
		}
		if c.RetainFor != nil {
			if d := c.RetainFor.Duration; d < minRetainFor || d > maxRetainFor {
				p.Add(sub("retainFor"), "%s is outside [%s, %s]", d, minRetainFor, maxRetainFor)
			}
		}
	}

	for _, idle := range []struct {
		name string
		d    *metav1.Duration
	}{{"suspendAfterIdle", s.SuspendAfterIdle}, {"retireAfterIdle", s.RetireAfterIdle}} {
		if idle.d != nil && (idle.d.Duration < minIdleAfter || idle.d.Duration > maxIdleAfter) {
			p.Add(field(idle.name), "%s is outside [%s, %s]", idle.d.Duration, minIdleAfter, maxIdleAfter)
		}
	}
	if s.SuspendAfterIdle != nil && s.RetireAfterIdle != nil && s.RetireAfterIdle.Duration <= s.SuspendAfterIdle.Duration {
		p.Add(field("retireAfterIdle"), "%s is not longer than suspendAfterIdle (%s)", s.RetireAfterIdle.Duration, s.SuspendAfterIdle.Duration)
	}

	for _, limit := range []struct {
		name string
		d    *metav1.Duration
	}{{"retiredTTL", s.RetiredTTL}, {"suspendedTTL", s.SuspendedTTL}, {"maxLifetime", s.MaxLifetime}} {
		if limit.d != nil && limit.d.Duration != 0 && (limit.d.Duration < minTimeLimit || limit.d.Duration > maxTimeLimit) {
			p.Add(field(limit.name), "%s is outside [%s, %s] (0 or absent: never)", limit.d.Duration, minTimeLimit, maxTimeLimit)
		}
	}

	workspace := DefaultWorkspacePath
	if s.WorkspacePath != "" {
		workspace = s.WorkspacePath
		checkWorkspacePath(p, field("workspacePath"), s.WorkspacePath)
	}
	if s.HelperPath != "" {
		checkHelperPath(p, field("helperPath"), s.HelperPath, workspace)
	} else if isUnder(DefaultHelperPath, workspace) {
		p.Add(field("workspacePath"), "%q holds the helper's default path %s, which the workload could then write", workspace, DefaultHelperPath)
	}
	if s.HelperImage != "" {
		checkImage(p, field("helperImage"), s.HelperImage, o.RequireDigestPinnedImages)
		if s.HelperPath != "" && s.HelperPath != DefaultHelperPath {
			p.Add(field("helperPath"), "must be %s (or empty) with helperImage: the helper is installed there", DefaultHelperPath)
		}
	}
	if len(s.Capabilities) > MaxCapabilities {
		p.Add(field("capabilities"), "has %d entries, more than %d", len(s.Capabilities), MaxCapabilities)
	}
	checkNames(p, field("capabilities"), s.Capabilities, validation.IsDNS1123Label)
}

// checkQuantity records the problems of one quantity and reports whether it is usable for
// comparisons. A nil quantity is absent: a problem only when required.
func checkQuantity(p *problem.List, path string, q *resource.Quantity, kind quantityKind, required bool) bool {
	if q == nil {
		if required {
			p.Add(path, "is required")
		}
		return false
	}
	if q.Sign() <= 0 {
		p.Add(path, "must be positive (got %s)", q.String())
		return false
	}
	approx := q.AsApproximateFloat64()
	switch kind {
	case byteQuantity:
		if approx > approxMaxBytes || q.Cmp(maxByteQuantity) > 0 {
			p.Add(path, "%s exceeds %d bytes", q.String(), int64(math.MaxInt64))
			return false
		}
		if approx < 0.5 || q.CmpInt64(q.Value()) != 0 {
			p.Add(path, "%s is not a whole number of bytes", q.String())
			return false
		}
	case cpuQuantity:
		if approx > approxMaxCPU || q.Cmp(maxCPUQuantity) > 0 {
			p.Add(path, "%s exceeds %d millicores", q.String(), int64(math.MaxInt64))
			return false
		}
		if approx < 0.0005 || q.Cmp(*resource.NewMilliQuantity(q.MilliValue(), resource.DecimalSI)) != 0 {
			p.Add(path, "%s is not a whole number of millicores", q.String())
			return false
		}
	}
	return true
}

// checkAtMost records a problem when both quantities are valid and q exceeds limit.
func checkAtMost(p *problem.List, path string, q *resource.Quantity, comparable bool, limitName string, limit *resource.Quantity) {
	if comparable && q.Cmp(*limit) > 0 {
		p.Add(path, "%s exceeds %s %s", q.String(), limitName, limit.String())
	}
}

func checkBetween(p *problem.List, path string, n, lo, hi int64) {
	if n < lo || n > hi {
		p.Add(path, "%d is outside [%d, %d]", n, lo, hi)
	}
}

// checkNames records invalid and duplicate entries of a list of names.
func checkNames(p *problem.List, path string, names []string, valid func(string) []string) {
	seen := make(map[string]bool, len(names))
	for i, n := range names {
		ip := fmt.Sprintf("%s[%d]", path, i)
		addAll(p, ip, n, valid(n))
		if seen[n] {
			p.Add(ip, "%q is listed twice", n)
		}
		seen[n] = true
	}
}

func checkNodeSelector(p *problem.List, path string, sel map[string]string) {
	keys := make([]string, 0, len(sel))
	for k := range sel {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		kp := fmt.Sprintf("%s[%q]", path, k)
		addAll(p, kp, k, validation.IsQualifiedName(k))
		addAll(p, kp, sel[k], validation.IsValidLabelValue(sel[k]))
	}
}

// checkToleration applies the rules the API server applies to a Pod's tolerations, minus
// the feature-gated numeric operators (Lt, Gt), which executor Pods do not need.
func checkToleration(p *problem.List, path string, t *corev1.Toleration) {
	if t.Key != "" {
		addAll(p, path+".key", t.Key, validation.IsQualifiedName(t.Key))
	}
	switch t.Operator {
	case "", corev1.TolerationOpEqual:
		if t.Key == "" {
			p.Add(path+".operator", "must be Exists when key is empty (an empty key matches every taint)")
		}
		addAll(p, path+".value", t.Value, validation.IsValidLabelValue(t.Value))
	case corev1.TolerationOpExists:
		if t.Value != "" {
			p.Add(path+".value", "must be empty when operator is Exists (got %q)", t.Value)
		}
	default:
		p.Add(path+".operator", "%q is not Equal or Exists", t.Operator)
	}
	switch t.Effect {
	case "", corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
	default:
		p.Add(path+".effect", "%q is not empty, NoSchedule, PreferNoSchedule or NoExecute", t.Effect)
	}
	if t.TolerationSeconds != nil {
		if t.Effect != corev1.TaintEffectNoExecute {
			p.Add(path+".tolerationSeconds", "applies only to effect NoExecute (effect is %q)", t.Effect)
		}
		if s := *t.TolerationSeconds; s < 0 || s > maxTolerationSeconds {
			p.Add(path+".tolerationSeconds", "%d is outside [0, %d]", s, int64(maxTolerationSeconds))
		}
	}
}

// checkHelperPath requires an absolute, clean path of plain characters outside the
// workload-writable mounts.
func checkHelperPath(p *problem.List, field, helper, workspace string) {
	switch {
	case len(helper) > maxHelperPathBytes:
		p.Add(field, "is %d bytes, more than %d", len(helper), maxHelperPathBytes)
	case !strings.HasPrefix(helper, "/"):
		p.Add(field, "%q is not an absolute path", helper)
	case !isHelperPathChars(helper):
		p.Add(field, "%q may contain only ASCII letters, digits and . _ + - /", helper)
	case path.Clean(helper) != helper || helper == "/":
		p.Add(field, "%q is not a clean path to a file (want %q)", helper, path.Clean(helper))
	case isUnder(helper, workspace) || isUnder(helper, tmpMountPath):
		p.Add(field, "%q is under %s or %s, which the workload can write", helper, workspace, tmpMountPath)
	}
}

// reservedMounts are where a workspace may not be mounted: the executor's temporary folder
// and the kernel's and runtime's file systems.
var reservedMounts = []string{tmpMountPath, "/proc", "/sys", "/dev", "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib64", "/var/run", "/run"}

// checkWorkspacePath requires an absolute, clean path of plain characters below the root,
// not on or under a reserved mount, nor above one.
func checkWorkspacePath(p *problem.List, field, workspace string) {
	switch {
	case len(workspace) > maxHelperPathBytes:
		p.Add(field, "is %d bytes, more than %d", len(workspace), maxHelperPathBytes)
	case !strings.HasPrefix(workspace, "/"):
		p.Add(field, "%q is not an absolute path", workspace)
	case !isHelperPathChars(workspace):
		p.Add(field, "%q may contain only ASCII letters, digits and . _ + - /", workspace)
	case path.Clean(workspace) != workspace || workspace == "/":
		p.Add(field, "%q is not a clean path below the root (want %q)", workspace, path.Clean(workspace))
	default:
		for _, r := range reservedMounts {
			if isUnder(workspace, r) || isUnder(r, workspace) {
				p.Add(field, "%q is on, under or above %s", workspace, r)
				return
			}
		}
	}
}

// isHelperPathChars reports whether s uses only the helper path's character set. The path is
// argv[0] of every exec and part of the canonical encoding, which relies on plain ASCII.
func isHelperPathChars(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '.', c == '_', c == '+', c == '-', c == '/':
		default:
			return false
		}
	}
	return true
}

// isUnder reports whether the clean absolute path p is dir or lies beneath it.
func isUnder(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+"/")
}
