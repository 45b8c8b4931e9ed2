package profile

import (
	"os"
	"testing"

	"sigs.k8s.io/yaml"
)

// FuzzParse: Parse never panics, and an accepted profile keeps its digest through a round
// trip: its effective spec, marshalled back to YAML and parsed again, is accepted and has the
// same digest.
func FuzzParse(f *testing.F) {
	if data, err := os.ReadFile("testdata/profiles.yaml"); err == nil {
		f.Add(data)
	}
	if md, err := os.ReadFile("../../docs/profiles.md"); err == nil {
		for _, block := range fencedBlocks(string(md), "yaml") {
			f.Add([]byte(block))
		}
	}
	for _, seed := range []string{
		doc(""),
		doc("\n    cpuLimit: 1.5\n    cpuRequest: 1500m\n    capabilities: [b, a]"),
		doc("\n    tolerations: [{operator: Exists}, {key: k, value: v, effect: NoExecute, tolerationSeconds: 0}]"),
		doc("\n    nodeSelector: {a.b/c: d}\n    imagePullSecrets: [x, y]\n    helperPath: /opt/h"),
		docSet("memoryLimit", "1e2"),
		docSet("storageSize", `"0.5Ki"`),
		docSet("cpuLimit", "1e-2000000000"),
		doc("\n    colour: blue"),
		doc("") + "---\n",
		"profiles: {a: ~}\n",
		"a: &x [*x]\n",
		"",
	} {
		f.Add([]byte(seed))
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := Parse(data)
		if err != nil {
			return
		}
		for _, name := range r.Names() {
			e, ok := r.Get(name)
			if !ok {
				t.Fatalf("Names() lists %q but Get does not find it", name)
			}
			if p, _ := r.Profile(name); p.Digest != e.Digest {
				t.Fatalf("Profile(%q).Digest = %s, Get says %s", name, p.Digest, e.Digest)
			}
			again, err := yaml.Marshal(map[string]any{"profiles": map[string]ProfileSpec{name: e.Spec}})
			if err != nil {
				t.Fatalf("marshal %q: %v", name, err)
			}
			r2, err := Parse(again)
			if err != nil {
				t.Fatalf("re-parse of accepted profile %q failed: %v\n%s", name, err, again)
			}
			e2, _ := r2.Get(name)
			if e2.Digest != e.Digest {
				t.Fatalf("digest of %q changed through a round trip: %s -> %s\n%s", name, e.Digest, e2.Digest, again)
			}
		}
	})
}
