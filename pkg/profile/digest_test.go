package profile

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var digestPattern = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// digestOfDoc parses a document and returns the digest of its profile called name.
func digestOfDoc(t *testing.T, doc, name string) string {
	t.Helper()
	r, err := Parse([]byte(doc))
	if err != nil {
		t.Fatalf("%v\n%s", err, doc)
	}
	e, ok := r.Get(name)
	if !ok {
		t.Fatalf("profile %s missing", name)
	}
	return e.Digest
}

// fencedBlocks returns the contents of the fenced code blocks of the given language in md.
func fencedBlocks(md, lang string) []string {
	var out []string
	for rest := md; ; {
		_, after, ok := strings.Cut(rest, "```"+lang+"\n")
		if !ok {
			return out
		}
		block, tail, _ := strings.Cut(after, "```")
		out = append(out, block)
		rest = tail
	}
}

// TestDigestDocumentedExample keeps docs/profiles.md honest: its worked example's YAML must
// encode to exactly the canonical JSON shown there, whose SHA-256 is the digest shown there.
func TestDigestDocumentedExample(t *testing.T) {
	md, err := os.ReadFile("../../docs/profiles.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(md), "\n## Worked example\n")
	if !ok {
		t.Fatal(`docs/profiles.md has no "## Worked example" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	yamls, jsons, texts := fencedBlocks(section, "yaml"), fencedBlocks(section, "json"), fencedBlocks(section, "text")
	if len(yamls) != 1 || len(jsons) != 1 || len(texts) != 1 {
		t.Fatalf("want one yaml, one json and one text block, got %d, %d, %d", len(yamls), len(jsons), len(texts))
	}
	wantJSON, wantDigest := strings.TrimSpace(jsons[0]), strings.TrimSpace(texts[0])

	r, err := Parse([]byte(yamls[0]))
	if err != nil {
		t.Fatal(err)
	}
	names := r.Names()
	if len(names) != 1 {
		t.Fatalf("example has profiles %v, want one", names)
	}
	e, _ := r.Get(names[0])
	enc, err := canonicalEncoding(&e.Spec)
	if err != nil {
		t.Fatal(err)
	}
	if string(enc) != wantJSON {
		t.Errorf("canonical encoding:\n got %s\nwant %s", enc, wantJSON)
	}
	sum := sha256.Sum256([]byte(wantJSON))
	if got := "sha256:" + hex.EncodeToString(sum[:]); got != wantDigest {
		t.Errorf("documented digest %s is not the SHA-256 of the documented JSON (%s)", wantDigest, got)
	}
	if e.Digest != wantDigest {
		t.Errorf("digest = %s, documented %s", e.Digest, wantDigest)
	}
}

// TestDigestIgnoresSpelling: ways of writing the same profile give the same digest.
func TestDigestIgnoresSpelling(t *testing.T) {
	base := digestOfDoc(t, doc(""), "p")
	same := map[string]string{
		"reordered keys": `
profiles:
  p:
    maxEnvironments: 1
    maxCommandDuration: 1m
    maxCommandBytes: 1024
    maxFileBytes: 1024
    tmpSizeLimit: 1Gi
    memoryLimit: 1Gi
    storageSize: 1Gi
    image: python:3.12
`,
		"1024Mi for 1Gi":             strings.ReplaceAll(doc(""), "1Gi", "1024Mi"),
		"plain bytes for 1Gi":        strings.ReplaceAll(doc(""), "1Gi", "1073741824"),
		"decimal exponent for 1Gi":   strings.ReplaceAll(doc(""), "1Gi", `"1073741824e0"`),
		"60s for 1m":                 docSet("maxCommandDuration", "60s"),
		"default helperPath written": doc("\n    helperPath: " + DefaultHelperPath),
		"empty commands":             doc("\n    commands: {}"),
		"empty optional fields":      doc("\n    storageClass: \"\"\n    runtimeClassName: \"\"\n    imagePullSecrets: []\n    nodeSelector: {}\n    tolerations: []\n    capabilities: []\n    helperPath: \"\""),
		"null optional fields":       doc("\n    storageClass: null\n    cpuLimit: null\n    imagePullSecrets: null\n    nodeSelector: ~"),
		"another profile name":       strings.Replace(doc(""), "  p:", "  q:", 1),
	}
	for name, d := range same {
		pname := "p"
		if name == "another profile name" {
			pname = "q"
		}
		if got := digestOfDoc(t, d, pname); got != base {
			t.Errorf("%s: digest %s, want %s", name, got, base)
		}
	}

	a := digestOfDoc(t, doc("\n    cpuLimit: 1\n    capabilities: [b, a]\n    tolerations: [{key: k, value: v}]"), "p")
	b := digestOfDoc(t, doc("\n    cpuLimit: 1000m\n    capabilities: [a, b]\n    tolerations: [{key: k, operator: Equal, value: v}]"), "p")
	if a != b {
		t.Errorf("cpu spelling, capability order or implicit Equal changed the digest: %s != %s", a, b)
	}
}

// TestDigestChangesWithEveryField: every field of the spec, and of a toleration, is part of
// the digest. The table is checked against the struct so a new field cannot be forgotten.
func TestDigestChangesWithEveryField(t *testing.T) {
	changes := map[string]func(*ProfileSpec){
		"image":                   func(s *ProfileSpec) { s.Image = "python:3.13" },
		"storageClass":            func(s *ProfileSpec) { s.StorageClass = "slow" },
		"storageSize":             func(s *ProfileSpec) { s.StorageSize = q("11Gi") },
		"cpuRequest":              func(s *ProfileSpec) { s.CPURequest = q("501m") },
		"cpuLimit":                func(s *ProfileSpec) { s.CPULimit = q("3") },
		"memoryRequest":           func(s *ProfileSpec) { s.MemoryRequest = q("1025Mi") },
		"memoryLimit":             func(s *ProfileSpec) { s.MemoryLimit = q("3Gi") },
		"ephemeralStorageRequest": func(s *ProfileSpec) { s.EphemeralStorageRequest = q("513Mi") },
		"ephemeralStorageLimit":   func(s *ProfileSpec) { s.EphemeralStorageLimit = q("3Gi") },
		"tmpSizeLimit":            func(s *ProfileSpec) { s.TmpSizeLimit = q("1025Mi") },
		"runtimeClassName":        func(s *ProfileSpec) { s.RuntimeClassName = "kata" },
		"imagePullSecrets":        func(s *ProfileSpec) { s.ImagePullSecrets = []string{"pull-b", "pull-a"} },
		"nodeSelector":            func(s *ProfileSpec) { s.NodeSelector["pool"] = "other" },
		"tolerations":             func(s *ProfileSpec) { s.Tolerations[0], s.Tolerations[1] = s.Tolerations[1], s.Tolerations[0] },
		"maxFileBytes":            func(s *ProfileSpec) { s.MaxFileBytes++ },
		"maxCommandBytes":         func(s *ProfileSpec) { s.MaxCommandBytes++ },
		"maxCommandDuration":      func(s *ProfileSpec) { s.MaxCommandDuration.Duration += time.Second },
		"maxEnvironments":         func(s *ProfileSpec) { s.MaxEnvironments++ },
		"helperPath":              func(s *ProfileSpec) { s.HelperPath = "/execplane/helper2" },
		"helperImage":             func(s *ProfileSpec) { s.HelperImage, s.HelperPath = "registry.example/helper:2", "" },
		"workspacePath":           func(s *ProfileSpec) { s.WorkspacePath = "/home/user" },
		"capabilities":            func(s *ProfileSpec) { s.Capabilities = s.Capabilities[:1] },
		"commands":                func(s *ProfileSpec) { s.Commands = &CommandsSpec{MaxDetached: 2} },
		// Each field of commands, set on its own.
		"commands.maxDetached":   func(s *ProfileSpec) { s.Commands = &CommandsSpec{MaxDetached: 3} },
		"commands.spoolBytes":    func(s *ProfileSpec) { s.Commands = &CommandsSpec{SpoolBytes: 1 << 20} },
		"commands.maxDuration":   func(s *ProfileSpec) { s.Commands = &CommandsSpec{MaxDuration: &metav1.Duration{Duration: time.Hour}} },
		"commands.retainRecords": func(s *ProfileSpec) { s.Commands = &CommandsSpec{RetainRecords: 7} },
		"commands.retainFor":     func(s *ProfileSpec) { s.Commands = &CommandsSpec{RetainFor: &metav1.Duration{Duration: time.Hour}} },
		// Each field of a toleration.
		"tolerations.key": func(s *ProfileSpec) { s.Tolerations[0].Key = "pool2" },
		"tolerations.operator": func(s *ProfileSpec) {
			s.Tolerations[0].Operator, s.Tolerations[0].Value = corev1.TolerationOpExists, ""
		},
		"tolerations.value":             func(s *ProfileSpec) { s.Tolerations[0].Value = "exec2" },
		"tolerations.effect":            func(s *ProfileSpec) { s.Tolerations[0].Effect = corev1.TaintEffectPreferNoSchedule },
		"tolerations.tolerationSeconds": func(s *ProfileSpec) { *s.Tolerations[1].TolerationSeconds++ },
		// Optional fields removed.
		"no storageClass":  func(s *ProfileSpec) { s.StorageClass = "" },
		"no cpuRequest":    func(s *ProfileSpec) { s.CPURequest = nil },
		"no nodeSelector":  func(s *ProfileSpec) { s.NodeSelector = nil },
		"no tolerations":   func(s *ProfileSpec) { s.Tolerations = nil },
		"no capabilities":  func(s *ProfileSpec) { s.Capabilities = nil },
		"no pull secrets":  func(s *ProfileSpec) { s.ImagePullSecrets = nil },
		"no runtime class": func(s *ProfileSpec) { s.RuntimeClassName = "" },
	}
	for _, f := range reflect.VisibleFields(reflect.TypeFor[ProfileSpec]()) {
		if changes[jsonName(f)] == nil && policyFields[jsonName(f)] == nil {
			t.Errorf("no digest change tested for ProfileSpec.%s", f.Name)
		}
	}
	for _, f := range reflect.VisibleFields(reflect.TypeFor[CommandsSpec]()) {
		if changes["commands."+jsonName(f)] == nil {
			t.Errorf("no digest change tested for CommandsSpec.%s", f.Name)
		}
	}
	for _, f := range reflect.VisibleFields(reflect.TypeFor[corev1.Toleration]()) {
		if changes["tolerations."+jsonName(f)] == nil {
			t.Errorf("no digest change tested for Toleration.%s", f.Name)
		}
	}

	seen := map[string]string{}
	baseSpec := validSpec()
	base := mustDigest(t, baseSpec)
	seen[base] = "base"
	for name, change := range changes {
		s := validSpec()
		change(&s)
		d := mustDigest(t, s)
		if other, dup := seen[d]; dup {
			t.Errorf("%s: digest equals that of %s", name, other)
		}
		seen[d] = name
	}
}

// policyFields are applied to environments, not what their executors are built from: they
// leave the digest as it is, so that changing them never makes a profile "changed".
var policyFields = map[string]func(*ProfileSpec){
	"suspendAfterIdle": func(s *ProfileSpec) { s.SuspendAfterIdle = &metav1.Duration{Duration: time.Hour} },
	"retireAfterIdle":  func(s *ProfileSpec) { s.RetireAfterIdle = &metav1.Duration{Duration: 48 * time.Hour} },
	"warmPool":         func(s *ProfileSpec) { s.WarmPool = &WarmPoolSpec{Size: 3} },
	"snapshots": func(s *ProfileSpec) {
		s.Snapshots = &SnapshotsSpec{VolumeSnapshotClassName: "csi-hostpath", MaxQuiesce: &metav1.Duration{Duration: time.Minute}}
	},
	"retiredTTL":   func(s *ProfileSpec) { s.RetiredTTL = &metav1.Duration{Duration: time.Hour} },
	"suspendedTTL": func(s *ProfileSpec) { s.SuspendedTTL = &metav1.Duration{Duration: time.Hour} },
	"maxLifetime":  func(s *ProfileSpec) { s.MaxLifetime = &metav1.Duration{Duration: 24 * time.Hour} },
}

func TestDigestIgnoresThePolicyFields(t *testing.T) {
	base := mustDigest(t, validSpec())
	for name, change := range policyFields {
		s := validSpec()
		change(&s)
		if d := mustDigest(t, s); d != base {
			t.Errorf("%s changed the digest", name)
		}
	}
}

func mustDigest(t *testing.T, s ProfileSpec) string {
	t.Helper()
	r, err := build(map[string]ProfileSpec{"p": s}, ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e, _ := r.Get("p")
	if !digestPattern.MatchString(e.Digest) {
		t.Fatalf("digest %q is not sha256:<64 lowercase hex>", e.Digest)
	}
	return e.Digest
}

// TestCanonicalEncodingShape pins properties docs/profiles.md promises: sorted keys, no
// whitespace, quantities as strings, the version key, absent optional fields omitted.
func TestCanonicalEncodingShape(t *testing.T) {
	r, err := Parse([]byte(doc("")))
	if err != nil {
		t.Fatal(err)
	}
	e, _ := r.Get("p")
	enc, err := canonicalEncoding(&e.Spec)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"encodingVersion":1,"helperPath":"/execplane/helper","image":"python:3.12",` +
		`"maxCommandBytes":1024,"maxCommandDuration":60000000000,"maxEnvironments":1,"maxFileBytes":1024,` +
		`"memoryLimit":"1073741824","storageSize":"1073741824","tmpSizeLimit":"1073741824"}`
	if string(enc) != want {
		t.Errorf("got  %s\nwant %s", enc, want)
	}
}
