package profile

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/execplane/execplane/pkg/problem"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func q(s string) *resource.Quantity {
	v := resource.MustParse(s)
	return &v
}

func ptr[T any](v T) *T { return &v }

// validSpec returns a spec that sets every field, valid under every option.
func validSpec() ProfileSpec {
	return ProfileSpec{
		Image:                   "registry.example.com/executors/python:3.12@sha256:" + strings.Repeat("ab", 32),
		StorageClass:            "fast-ssd",
		StorageSize:             q("10Gi"),
		CPURequest:              q("500m"),
		CPULimit:                q("2"),
		MemoryRequest:           q("1Gi"),
		MemoryLimit:             q("2Gi"),
		EphemeralStorageRequest: q("512Mi"),
		EphemeralStorageLimit:   q("2Gi"),
		TmpSizeLimit:            q("1Gi"),
		RuntimeClassName:        "gvisor",
		ImagePullSecrets:        []string{"pull-a", "pull-b"},
		NodeSelector:            map[string]string{"kubernetes.io/arch": "amd64", "pool": "exec"},
		Tolerations: []corev1.Toleration{
			{Key: "pool", Operator: corev1.TolerationOpEqual, Value: "exec", Effect: corev1.TaintEffectNoSchedule},
			{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists,
				Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr(int64(300))},
		},
		MaxFileBytes:       16 << 20,
		MaxCommandBytes:    1 << 20,
		MaxCommandDuration: metav1.Duration{Duration: 10 * time.Minute},
		MaxEnvironments:    100,
		HelperPath:         "/opt/execplane/helper",
		Capabilities:       []string{"network-egress", "gpu"},
	}
}

var pinned = ParseOptions{RequireDigestPinnedImages: true}

// build makes a registry from specs written in Go, as Parse does from YAML.
func build(specs map[string]ProfileSpec, o ParseOptions) (*Registry, error) {
	return newRegistry(specs, o, &problem.List{})
}

func TestValidSpecIsValid(t *testing.T) {
	for _, o := range []ParseOptions{{}, pinned} {
		if _, err := build(map[string]ProfileSpec{"p": validSpec()}, o); err != nil {
			t.Fatalf("options %+v: %v", o, err)
		}
	}
}

// TestValidateRules has one row per rule: the row breaks only that rule, and the error must
// wrap ErrInvalidProfile and name the field's path.
func TestValidateRules(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*ProfileSpec)
		opts   ParseOptions
		path   string
	}{
		{"image required", func(s *ProfileSpec) { s.Image = "" }, ParseOptions{}, "profiles.p.image"},
		{"image grammar", func(s *ProfileSpec) { s.Image = "Registry.example.com/Python" }, ParseOptions{}, "profiles.p.image"},
		{"image name length", func(s *ProfileSpec) { s.Image = "r.io/" + strings.Repeat("a", 251) + ":1" }, ParseOptions{}, "profiles.p.image"},
		{"image digest length", func(s *ProfileSpec) { s.Image = "python@sha256:abc" }, ParseOptions{}, "profiles.p.image"},
		{"image digest algorithm", func(s *ProfileSpec) { s.Image = "python@md5:" + strings.Repeat("a", 32) }, ParseOptions{}, "profiles.p.image"},
		{"image digest pinned", func(s *ProfileSpec) { s.Image = "python:3.12" }, pinned, "profiles.p.image"},
		{"image sha512 is not a pin", func(s *ProfileSpec) { s.Image = "python@sha512:" + strings.Repeat("a", 128) }, pinned, "profiles.p.image"},
		{"storageClass name", func(s *ProfileSpec) { s.StorageClass = "Fast_SSD" }, ParseOptions{}, "profiles.p.storageClass"},
		{"storageSize required", func(s *ProfileSpec) { s.StorageSize = nil }, ParseOptions{}, "profiles.p.storageSize"},
		{"storageSize positive", func(s *ProfileSpec) { s.StorageSize = q("0") }, ParseOptions{}, "profiles.p.storageSize"},
		{"quantity not negative", func(s *ProfileSpec) { s.CPULimit = q("-1") }, ParseOptions{}, "profiles.p.cpuLimit"},
		{"cpu whole millicores", func(s *ProfileSpec) { s.CPURequest = q("0.0005") }, ParseOptions{}, "profiles.p.cpuRequest"},
		{"cpu bound", func(s *ProfileSpec) { s.CPULimit = q("1e16") }, ParseOptions{}, "profiles.p.cpuLimit"},
		{"memory whole bytes", func(s *ProfileSpec) { s.MemoryRequest = q("100m") }, ParseOptions{}, "profiles.p.memoryRequest"},
		{"memoryLimit required", func(s *ProfileSpec) { s.MemoryLimit = nil }, ParseOptions{}, "profiles.p.memoryLimit"},
		{"bytes bound", func(s *ProfileSpec) { s.EphemeralStorageLimit = q("9223372036854775808") }, ParseOptions{}, "profiles.p.ephemeralStorageLimit"},
		{"tmpSizeLimit required", func(s *ProfileSpec) { s.TmpSizeLimit = nil }, ParseOptions{}, "profiles.p.tmpSizeLimit"},
		{"cpuRequest <= cpuLimit", func(s *ProfileSpec) { s.CPURequest = q("2001m") }, ParseOptions{}, "profiles.p.cpuRequest"},
		{"memoryRequest <= memoryLimit", func(s *ProfileSpec) { s.MemoryRequest = q("3Gi") }, ParseOptions{}, "profiles.p.memoryRequest"},
		{"ephemeralStorageRequest <= limit", func(s *ProfileSpec) { s.EphemeralStorageRequest = q("3Gi") }, ParseOptions{}, "profiles.p.ephemeralStorageRequest"},
		{"tmpSizeLimit <= memoryLimit", func(s *ProfileSpec) { s.TmpSizeLimit = q("3Gi") }, ParseOptions{}, "profiles.p.tmpSizeLimit"},
		{"runtimeClassName name", func(s *ProfileSpec) { s.RuntimeClassName = "g visor" }, ParseOptions{}, "profiles.p.runtimeClassName"},
		{"imagePullSecrets name", func(s *ProfileSpec) { s.ImagePullSecrets[1] = "Pull_B" }, ParseOptions{}, "profiles.p.imagePullSecrets[1]"},
		{"imagePullSecrets unique", func(s *ProfileSpec) { s.ImagePullSecrets[1] = "pull-a" }, ParseOptions{}, "profiles.p.imagePullSecrets[1]"},
		{"nodeSelector key", func(s *ProfileSpec) { s.NodeSelector["bad key"] = "x" }, ParseOptions{}, `profiles.p.nodeSelector["bad key"]`},
		{"nodeSelector value", func(s *ProfileSpec) { s.NodeSelector["pool"] = "-bad-" }, ParseOptions{}, `profiles.p.nodeSelector["pool"]`},
		{"toleration key", func(s *ProfileSpec) { s.Tolerations[0].Key = "bad key" }, ParseOptions{}, "profiles.p.tolerations[0].key"},
		{"toleration value", func(s *ProfileSpec) { s.Tolerations[0].Value = "bad value" }, ParseOptions{}, "profiles.p.tolerations[0].value"},
		{"toleration Exists has no value", func(s *ProfileSpec) { s.Tolerations[1].Value = "x" }, ParseOptions{}, "profiles.p.tolerations[1].value"},
		{"toleration empty key needs Exists", func(s *ProfileSpec) { s.Tolerations[0].Key = "" }, ParseOptions{}, "profiles.p.tolerations[0].operator"},
		{"toleration operator", func(s *ProfileSpec) { s.Tolerations[0].Operator = corev1.TolerationOpLt }, ParseOptions{}, "profiles.p.tolerations[0].operator"},
		{"toleration effect", func(s *ProfileSpec) { s.Tolerations[0].Effect = "NoRun" }, ParseOptions{}, "profiles.p.tolerations[0].effect"},
		{"tolerationSeconds needs NoExecute", func(s *ProfileSpec) { s.Tolerations[0].TolerationSeconds = ptr(int64(1)) }, ParseOptions{}, "profiles.p.tolerations[0].tolerationSeconds"},
		{"tolerationSeconds not negative", func(s *ProfileSpec) { s.Tolerations[1].TolerationSeconds = ptr(int64(-1)) }, ParseOptions{}, "profiles.p.tolerations[1].tolerationSeconds"},
		{"tolerationSeconds bound", func(s *ProfileSpec) { s.Tolerations[1].TolerationSeconds = ptr(int64(1 << 53)) }, ParseOptions{}, "profiles.p.tolerations[1].tolerationSeconds"},
		{"maxFileBytes minimum", func(s *ProfileSpec) { s.MaxFileBytes = minMaxFileBytes - 1 }, ParseOptions{}, "profiles.p.maxFileBytes"},
		{"maxFileBytes ceiling", func(s *ProfileSpec) { s.MaxFileBytes = MaxFileBytesCeiling + 1 }, ParseOptions{}, "profiles.p.maxFileBytes"},
		{"maxCommandBytes minimum", func(s *ProfileSpec) { s.MaxCommandBytes = 0 }, ParseOptions{}, "profiles.p.maxCommandBytes"},
		{"maxCommandBytes ceiling", func(s *ProfileSpec) { s.MaxCommandBytes = MaxCommandBytesCeiling + 1 }, ParseOptions{}, "profiles.p.maxCommandBytes"},
		{"maxCommandDuration minimum", func(s *ProfileSpec) { s.MaxCommandDuration.Duration = time.Second - 1 }, ParseOptions{}, "profiles.p.maxCommandDuration"},
		{"maxCommandDuration ceiling", func(s *ProfileSpec) { s.MaxCommandDuration.Duration = time.Hour + 1 }, ParseOptions{}, "profiles.p.maxCommandDuration"},
		{"commands.maxDetached ceiling", func(s *ProfileSpec) { s.Commands = &CommandsSpec{MaxDetached: MaxDetachedCeiling + 1} }, ParseOptions{}, "profiles.p.commands.maxDetached"},
		{"commands.maxDetached negative", func(s *ProfileSpec) { s.Commands = &CommandsSpec{MaxDetached: -1} }, ParseOptions{}, "profiles.p.commands.maxDetached"},
		{"commands.spoolBytes minimum", func(s *ProfileSpec) { s.Commands = &CommandsSpec{SpoolBytes: 4<<10 - 1} }, ParseOptions{}, "profiles.p.commands.spoolBytes"},
		{"commands.spoolBytes ceiling", func(s *ProfileSpec) { s.Commands = &CommandsSpec{SpoolBytes: MaxSpoolBytesCeiling + 1} }, ParseOptions{}, "profiles.p.commands.spoolBytes"},
		{"commands.maxDuration ceiling", func(s *ProfileSpec) {
			s.Commands = &CommandsSpec{MaxDuration: &metav1.Duration{Duration: MaxDetachedDurationCeiling + 1}}
		}, ParseOptions{}, "profiles.p.commands.maxDuration"},
		{"commands.retainRecords ceiling", func(s *ProfileSpec) { s.Commands = &CommandsSpec{RetainRecords: MaxRetainRecordsCeiling + 1} }, ParseOptions{}, "profiles.p.commands.retainRecords"},
		{"commands.retainFor minimum", func(s *ProfileSpec) { s.Commands = &CommandsSpec{RetainFor: &metav1.Duration{Duration: time.Second}} }, ParseOptions{}, "profiles.p.commands.retainFor"},
		{"suspendAfterIdle minimum", func(s *ProfileSpec) { s.SuspendAfterIdle = &metav1.Duration{Duration: time.Second} }, ParseOptions{}, "profiles.p.suspendAfterIdle"},
		{"retireAfterIdle ceiling", func(s *ProfileSpec) { s.RetireAfterIdle = &metav1.Duration{Duration: maxIdleAfter + 1} }, ParseOptions{}, "profiles.p.retireAfterIdle"},
		{"retiredTTL under a second", func(s *ProfileSpec) { s.RetiredTTL = &metav1.Duration{Duration: time.Millisecond} }, ParseOptions{}, "profiles.p.retiredTTL"},
		{"suspendedTTL negative", func(s *ProfileSpec) { s.SuspendedTTL = &metav1.Duration{Duration: -time.Second} }, ParseOptions{}, "profiles.p.suspendedTTL"},
		{"maxLifetime ceiling", func(s *ProfileSpec) { s.MaxLifetime = &metav1.Duration{Duration: maxTimeLimit + 1} }, ParseOptions{}, "profiles.p.maxLifetime"},
		{"retireAfterIdle not after suspendAfterIdle", func(s *ProfileSpec) {
			s.SuspendAfterIdle, s.RetireAfterIdle = &metav1.Duration{Duration: time.Hour}, &metav1.Duration{Duration: time.Hour}
		}, ParseOptions{}, "profiles.p.retireAfterIdle"},
		{"snapshots.method unknown", func(s *ProfileSpec) { s.Snapshots = &SnapshotsSpec{Method: "rsync"} }, ParseOptions{}, "profiles.p.snapshots.method"},
		{"snapshots csi without a class", func(s *ProfileSpec) { s.Snapshots = &SnapshotsSpec{Method: SnapshotCSI} }, ParseOptions{}, "profiles.p.snapshots.volumeSnapshotClassName"},
		{"snapshots class not a name", func(s *ProfileSpec) { s.Snapshots = &SnapshotsSpec{VolumeSnapshotClassName: "Not A Name"} }, ParseOptions{}, "profiles.p.snapshots.volumeSnapshotClassName"},
		{"snapshots.maxQuiesce too long", func(s *ProfileSpec) {
			s.Snapshots = &SnapshotsSpec{MaxQuiesce: &metav1.Duration{Duration: time.Hour}}
		}, ParseOptions{}, "profiles.p.snapshots.maxQuiesce"},
		{"snapshots.maxCopyDuration too short", func(s *ProfileSpec) {
			s.Snapshots = &SnapshotsSpec{MaxCopyDuration: &metav1.Duration{Duration: time.Second}}
		}, ParseOptions{}, "profiles.p.snapshots.maxCopyDuration"},
		{"warmPool.size negative", func(s *ProfileSpec) { s.WarmPool = &WarmPoolSpec{Size: -1} }, ParseOptions{}, "profiles.p.warmPool.size"},
		{"warmPool.size above maxEnvironments", func(s *ProfileSpec) { s.WarmPool = &WarmPoolSpec{Size: s.MaxEnvironments + 1} }, ParseOptions{}, "profiles.p.warmPool.size"},
		{"warmPool.size ceiling", func(s *ProfileSpec) {
			s.MaxEnvironments, s.WarmPool = MaxEnvironmentsCeiling, &WarmPoolSpec{Size: MaxWarmPoolCeiling + 1}
		}, ParseOptions{}, "profiles.p.warmPool.size"},
		{"maxEnvironments minimum", func(s *ProfileSpec) { s.MaxEnvironments = 0 }, ParseOptions{}, "profiles.p.maxEnvironments"},
		{"maxEnvironments ceiling", func(s *ProfileSpec) { s.MaxEnvironments = MaxEnvironmentsCeiling + 1 }, ParseOptions{}, "profiles.p.maxEnvironments"},
		{"helperPath absolute", func(s *ProfileSpec) { s.HelperPath = "execplane/helper" }, ParseOptions{}, "profiles.p.helperPath"},
		{"helperPath clean", func(s *ProfileSpec) { s.HelperPath = "/execplane/../helper" }, ParseOptions{}, "profiles.p.helperPath"},
		{"helperPath not root", func(s *ProfileSpec) { s.HelperPath = "/" }, ParseOptions{}, "profiles.p.helperPath"},
		{"helperPath characters", func(s *ProfileSpec) { s.HelperPath = "/opt/exec plane/helper" }, ParseOptions{}, "profiles.p.helperPath"},
		{"helperPath length", func(s *ProfileSpec) { s.HelperPath = "/" + strings.Repeat("a", maxHelperPathBytes) }, ParseOptions{}, "profiles.p.helperPath"},
		{"helperPath not in workspace", func(s *ProfileSpec) { s.HelperPath = "/workspace/helper" }, ParseOptions{}, "profiles.p.helperPath"},
		{"helperPath not in tmp", func(s *ProfileSpec) { s.HelperPath = "/tmp/helper" }, ParseOptions{}, "profiles.p.helperPath"},
		{"helperPath not in the workspace moved", func(s *ProfileSpec) { s.WorkspacePath, s.HelperPath = "/home/user", "/home/user/bin/helper" }, ParseOptions{}, "profiles.p.helperPath"},
		{"workspacePath absolute", func(s *ProfileSpec) { s.WorkspacePath = "home/user" }, ParseOptions{}, "profiles.p.workspacePath"},
		{"workspacePath clean", func(s *ProfileSpec) { s.WorkspacePath = "/home/user/" }, ParseOptions{}, "profiles.p.workspacePath"},
		{"workspacePath not root", func(s *ProfileSpec) { s.WorkspacePath = "/" }, ParseOptions{}, "profiles.p.workspacePath"},
		{"workspacePath not tmp", func(s *ProfileSpec) { s.WorkspacePath = "/tmp/w" }, ParseOptions{}, "profiles.p.workspacePath"},
		{"workspacePath not above a reserved mount", func(s *ProfileSpec) { s.WorkspacePath = "/var" }, ParseOptions{}, "profiles.p.workspacePath"},
		{"workspacePath not over the default helper", func(s *ProfileSpec) { s.WorkspacePath, s.HelperPath = "/execplane", "" }, ParseOptions{}, "profiles.p.workspacePath"},
		{"workspacePath not over the helper", func(s *ProfileSpec) { s.WorkspacePath = "/opt" }, ParseOptions{}, "profiles.p.helperPath"},
		{"capability identifier", func(s *ProfileSpec) { s.Capabilities[1] = "Network_Egress" }, ParseOptions{}, "profiles.p.capabilities[1]"},
		{"capability unique", func(s *ProfileSpec) { s.Capabilities[1] = "network-egress" }, ParseOptions{}, "profiles.p.capabilities[1]"},
		{"capabilities count", func(s *ProfileSpec) {
			s.Capabilities = nil
			for i := range MaxCapabilities + 1 {
				s.Capabilities = append(s.Capabilities, "cap-"+string(rune('a'+i%26))+string(rune('a'+i/26)))
			}
		}, ParseOptions{}, "profiles.p.capabilities"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := validSpec()
			tt.mutate(&s)
			_, err := build(map[string]ProfileSpec{"p": s}, tt.opts)
			if !errors.Is(err, ErrInvalidProfile) {
				t.Fatalf("err = %v, want ErrInvalidProfile", err)
			}
			if !strings.Contains(err.Error(), "\n"+tt.path+": ") {
				t.Fatalf("error does not name %s:\n%v", tt.path, err)
			}
		})
	}
}

func TestValidateProfileNames(t *testing.T) {
	for _, name := range []string{"", "Python", "py_thon", "-python", strings.Repeat("a", 64)} {
		_, err := build(map[string]ProfileSpec{name: validSpec()}, ParseOptions{})
		if !errors.Is(err, ErrInvalidProfile) || !strings.Contains(err.Error(), profilePath(name)+": profile name") {
			t.Errorf("name %q: err = %v", name, err)
		}
	}
	if _, err := build(map[string]ProfileSpec{strings.Repeat("a", 63): validSpec()}, ParseOptions{}); err != nil {
		t.Errorf("63-byte name: %v", err)
	}
}

func TestValidateRequiresAProfile(t *testing.T) {
	for _, doc := range []string{"", "profiles: {}\n", "profiles:\n"} {
		_, err := Parse([]byte(doc))
		if !errors.Is(err, ErrInvalidProfile) || !strings.Contains(err.Error(), "at least one profile") {
			t.Errorf("%q: err = %v", doc, err)
		}
	}
}

// TestValidateReportsEveryProblem checks that one pass reports every problem of every
// profile, not the first one found.
func TestValidateReportsEveryProblem(t *testing.T) {
	doc := `
profiles:
  a:
    image: ""
    storageSize: "0"
    cpuRequest: "2"
    cpuLimit: "1"
    memoryLimit: 100m
    maxFileBytes: 1
    maxCommandBytes: 1
    maxCommandDuration: 2h
    maxEnvironments: 0
    helperPath: relative
    tolerations:
      - operator: Exists
        value: x
        effect: Sometimes
  Bad_Name:
    image: python
    storageSize: 1Gi
    memoryLimit: 1Gi
    tmpSizeLimit: 1Gi
    maxFileBytes: 1024
    maxCommandBytes: 1024
    maxCommandDuration: 1s
    maxEnvironments: 1
    capabilities: [x, x]
`
	_, err := Parse([]byte(doc))
	if !errors.Is(err, ErrInvalidProfile) {
		t.Fatalf("err = %v", err)
	}
	want := []string{
		"profiles.a.image", "profiles.a.storageSize", "profiles.a.cpuRequest", "profiles.a.memoryLimit",
		"profiles.a.tmpSizeLimit", "profiles.a.maxFileBytes", "profiles.a.maxCommandBytes",
		"profiles.a.maxCommandDuration", "profiles.a.maxEnvironments", "profiles.a.helperPath",
		"profiles.a.tolerations[0].value", "profiles.a.tolerations[0].effect",
		`profiles["Bad_Name"]: profile name`, `profiles["Bad_Name"].capabilities[1]`,
	}
	msg := err.Error()
	for _, w := range want {
		if !strings.Contains(msg, "\n"+w) {
			t.Errorf("missing %s", w)
		}
	}
	if got := strings.Count(msg, "\n"); got != len(want) {
		t.Errorf("%d problems reported, want %d:\n%s", got, len(want), msg)
	}
}

// TestParseReportsDecodeAndValidationProblemsTogether: a profile that cannot be decoded does
// not hide another profile's problems.
func TestParseReportsDecodeAndValidationProblemsTogether(t *testing.T) {
	doc := "profiles:\n" +
		"  a:" + minimal + "\n    colour: blue\n" +
		"  b:" + strings.Replace(minimal, "maxEnvironments: 1", "maxEnvironments: many", 1) + "\n" +
		"  c:" + strings.Replace(minimal, "memoryLimit: 1Gi", "memoryLimit: 1e999", 1) + "\n" +
		"  d:" + strings.Replace(minimal, "maxEnvironments: 1", "maxEnvironments: 0", 1) + "\n"
	_, err := Parse([]byte(doc))
	if !errors.Is(err, ErrInvalidProfile) {
		t.Fatalf("err = %v", err)
	}
	for _, want := range []string{
		`unknown field "profiles.a.colour"`,
		"profiles.b: json: cannot unmarshal string",
		"profiles.c.memoryLimit: ",
		"profiles.d.maxEnvironments: 0 is outside",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%v", want, err)
		}
	}
}

// The effective snapshot method and bounds.
func TestSnapshotPolicy(t *testing.T) {
	for _, c := range []struct {
		spec *SnapshotsSpec
		want string
	}{
		{nil, SnapshotCopy},
		{&SnapshotsSpec{}, SnapshotCopy},
		{&SnapshotsSpec{VolumeSnapshotClassName: "snap"}, SnapshotCSI},
		{&SnapshotsSpec{VolumeSnapshotClassName: "snap", Method: SnapshotCopy}, SnapshotCopy},
	} {
		s := validSpec()
		s.Snapshots = c.spec
		if got := s.SnapshotMethod(); got != c.want {
			t.Errorf("%+v: method %s, want %s", c.spec, got, c.want)
		}
	}
	s := validSpec()
	if q, c := s.SnapshotBounds(); q != DefaultMaxQuiesce || c != DefaultMaxCopyDuration {
		t.Errorf("defaults %v %v", q, c)
	}
	s.Snapshots = &SnapshotsSpec{MaxQuiesce: &metav1.Duration{Duration: time.Minute}, MaxCopyDuration: &metav1.Duration{Duration: 3 * time.Hour}}
	if q, c := s.SnapshotBounds(); q != time.Minute || c != 3*time.Hour {
		t.Errorf("set %v %v", q, c)
	}
}
