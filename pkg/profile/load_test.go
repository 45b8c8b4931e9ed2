package profile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/execplane/execplane/pkg/problem"

	"sigs.k8s.io/yaml"
)

// minimal is the smallest valid profile body, indented to sit under "profiles: p:".
const minimal = `
    image: python:3.12
    storageSize: 1Gi
    memoryLimit: 1Gi
    tmpSizeLimit: 1Gi
    maxFileBytes: 1024
    maxCommandBytes: 1024
    maxCommandDuration: 1m
    maxEnvironments: 1`

func doc(extra string) string { return "profiles:\n  p:" + minimal + extra + "\n" }

// docSet is doc with the minimal profile's field key set to value (replaced, not repeated).
func docSet(key, value string) string {
	var b strings.Builder
	b.WriteString("profiles:\n  p:")
	for _, line := range strings.Split(minimal, "\n")[1:] {
		if !strings.HasPrefix(line, "    "+key+":") {
			b.WriteString("\n" + line)
		}
	}
	return b.String() + "\n    " + key + ": " + value + "\n"
}

func TestParseMinimal(t *testing.T) {
	r, err := Parse([]byte(doc("")))
	if err != nil {
		t.Fatal(err)
	}
	e, ok := r.Get("p")
	if !ok {
		t.Fatal("profile p missing")
	}
	if e.Spec.HelperPath != DefaultHelperPath {
		t.Errorf("helperPath = %q, want the default %q", e.Spec.HelperPath, DefaultHelperPath)
	}
	var p problem.List
	checkHelperPath(&p, "default", DefaultHelperPath, DefaultWorkspacePath)
	if err := p.Err(ErrInvalidProfile); err != nil {
		t.Errorf("DefaultHelperPath is invalid: %v", err)
	}
}

// TestSigsYAMLUnmarshalStrict records what sigs.k8s.io/yaml's UnmarshalStrict does and does
// not refuse. It refuses unknown fields and repeated keys, but matches keys case-insensitively
// and ignores every document after the first, which is why decode uses its own strict path
// (TestParseStrict). If this test starts failing, the library changed: revisit decode.
func TestSigsYAMLUnmarshalStrict(t *testing.T) {
	strict := func(s string) error {
		var f struct {
			Profiles map[string]ProfileSpec `json:"profiles"`
		}
		return yaml.UnmarshalStrict([]byte(s), &f)
	}
	if err := strict(doc("\n    colour: blue")); err == nil || !strings.Contains(err.Error(), `unknown field "colour"`) {
		t.Errorf("unknown field: err = %v, want refusal", err)
	}
	if err := strict(doc("\n    image: node:22")); err == nil || !strings.Contains(err.Error(), `key "image" already set`) {
		t.Errorf("duplicate key: err = %v, want refusal", err)
	}
	if err := strict(doc("\n    Image: node:22")); err != nil {
		t.Errorf("case-variant duplicate: err = %v; the library now refuses it", err)
	}
	if err := strict(doc("") + "---\nprofiles: {}\n"); err != nil {
		t.Errorf("second document: err = %v; the library now refuses it", err)
	}
}

func TestParseStrict(t *testing.T) {
	tests := []struct {
		name, doc, want string
	}{
		{"unknown profile field", doc("\n    colour: blue"), `unknown field "profiles.p.colour"`},
		{"unknown top-level field", doc("") + "defaults: {}\n", `unknown field "defaults"`},
		{"unknown toleration field", doc("\n    tolerations: [{key: a, operator: Exists, colour: blue}]"), `unknown field "profiles.p.tolerations[0].colour"`},
		{"duplicate field", doc("\n    image: node:22"), `key "image" already set`},
		{"duplicate profile", doc("") + "  p:" + minimal + "\n", `key "p" already set`},
		{"duplicate nodeSelector key", doc("\n    nodeSelector: {a: x, a: y}"), `key "a" already set`},
		{"case-variant field", doc("\n    Image: node:22"), `unknown field "profiles.p.Image"`},
		{"second document", doc("") + "---\nprofiles: {}\n", "more than one YAML document"},
		{"empty second document", doc("") + "---\n", "more than one YAML document"},
		{"non-string key", doc("\n    nodeSelector: {1: x}"), "profiles.p.nodeSelector: mapping key 1 is a int"},
		{"boolean key", doc("\n    nodeSelector: {yes: x}"), "mapping key true is a bool"},
		{"string for integer", docSet("maxEnvironments", `"5"`), "cannot unmarshal string"},
		{"quantity for integer", docSet("maxFileBytes", "1Mi"), "cannot unmarshal string"},
		{"float for integer", docSet("maxFileBytes", "1.5"), "cannot unmarshal number 1.5"},
		{"number for string", doc("\n    storageClass: 5"), "cannot unmarshal number"},
		{"boolean for string", doc("\n    nodeSelector: {gpu: yes}"), "cannot unmarshal bool"},
		{"number for duration", docSet("maxCommandDuration", "600"), "maxCommandDuration"},
		{"bad duration", docSet("maxCommandDuration", "ten minutes"), "invalid duration"},
		{"map for list", doc("\n    imagePullSecrets: {a: b}"), "cannot unmarshal object"},
		{"scalar for list", doc("\n    tolerations: a"), "cannot unmarshal string"},
		{"bad quantity", doc("\n    cpuLimit: lots"), "profiles.p.cpuLimit"},
		{"bad helper image", doc("\n    helperImage: \"not an image\""), "profiles.p.helperImage"},
		{"helper image with another helper path", doc("\n    helperImage: registry.example/helper:1\n    helperPath: /opt/helper"), "profiles.p.helperPath: must be /execplane/helper"},
		{"long quantity", doc("\n    cpuLimit: \"" + strings.Repeat("1", 65) + "\""), "profiles.p.cpuLimit"},
		{"huge negative exponent", doc("\n    cpuLimit: 1e-2000000000"), "profiles.p.cpuLimit"},
		{"huge positive exponent", docSet("storageSize", "1e400"), "profiles.p.storageSize"},
		{"infinite number", doc("\n    cpuLimit: .inf"), "not a finite number"},
		{"top-level list", "- profiles\n", "cannot unmarshal array"},
		{"syntax error", "profiles: [\n", "yaml:"},
		{"profiles not a map", "profiles: [a]\n", "cannot unmarshal array"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			_, err := Parse([]byte(tt.doc))
			if !errors.Is(err, ErrInvalidProfile) {
				t.Fatalf("err = %v, want ErrInvalidProfile", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want it to contain %q", err, tt.want)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("took %s", d)
			}
		})
	}
}

func TestParseSizeCap(t *testing.T) {
	big := []byte(doc("") + "#" + strings.Repeat("x", MaxProfilesFileBytes))
	if _, err := Parse(big); !errors.Is(err, ErrInvalidProfile) || !strings.Contains(err.Error(), "exceeds") {
		t.Errorf("oversized document: err = %v", err)
	}
	path := filepath.Join(t.TempDir(), "profiles.yaml")
	if err := os.WriteFile(path, big, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadProfiles(path); !errors.Is(err, ErrInvalidProfile) || !strings.Contains(err.Error(), "exceeds") {
		t.Errorf("oversized file: err = %v", err)
	}
	// Exactly at the cap is fine: pad a valid document with a comment.
	atCap := []byte(doc(""))
	atCap = append(atCap, '#')
	atCap = append(atCap, strings.Repeat("x", MaxProfilesFileBytes-len(atCap))...)
	if _, err := Parse(atCap); err != nil {
		t.Errorf("document at the cap: %v", err)
	}
}

func TestLoadProfiles(t *testing.T) {
	r, err := LoadProfiles("testdata/profiles.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(r.Names(), ","); got != "node-sandboxed,python" {
		t.Errorf("Names() = %s", got)
	}
	e, _ := r.Get("node-sandboxed")
	if got := strings.Join(e.Spec.Capabilities, ","); got != CapabilityNetworkEgress {
		t.Errorf("capabilities = %s", got)
	}
	if e.Spec.HelperPath != "/opt/execplane/helper" {
		t.Errorf("helperPath = %s", e.Spec.HelperPath)
	}

	_, err = ParseOptions{RequireDigestPinnedImages: true}.Load("testdata/profiles.yaml")
	if !errors.Is(err, ErrInvalidProfile) || !strings.Contains(err.Error(), "profiles.python.image") ||
		strings.Contains(err.Error(), "profiles.node-sandboxed.image") {
		t.Errorf("pinned images required: err = %v, want only profiles.python.image refused", err)
	}

	if _, err := LoadProfiles(filepath.Join(t.TempDir(), "absent.yaml")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: err = %v, want fs.ErrNotExist", err)
	}
}

// TestQuantityFieldsCoverSpec makes sure the pre-decoding quantity check knows every
// quantity field.
func TestQuantityFieldsCoverSpec(t *testing.T) {
	want := "storageSize,cpuRequest,cpuLimit,memoryRequest,memoryLimit,ephemeralStorageRequest,ephemeralStorageLimit,tmpSizeLimit"
	if got := strings.Join(quantityFields, ","); got != want {
		t.Errorf("quantityFields = %s, want %s", got, want)
	}
}
