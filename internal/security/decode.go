package security

import (
	"encoding/json"

	"github.com/execplane/execplane/pkg/problem"

	kjson "sigs.k8s.io/json"

	"github.com/execplane/execplane/pkg/strictyaml"
)

// The manifest decoder shares pkg/profile's approach: internal/strictyaml parses exactly one
// document with duplicate and non-string keys refused, and sigs.k8s.io/json decodes it into
// the typed struct in strict mode (case-sensitive keys, unknown and duplicate fields
// reported). sigs.k8s.io/yaml's UnmarshalStrict is not used: it matches keys
// case-insensitively and silently ignores documents after the first.

// decodeStrict decodes one YAML document into v, strictly. Every problem found is recorded
// in p; it reports whether v was decoded cleanly.
func decodeStrict(data []byte, v any, p *problem.List) bool {
	doc, err := strictyaml.Document(data, "manifest")
	if err != nil {
		p.AddErr(err)
		return false
	}
	if doc == nil {
		p.Add("manifest", "is empty")
		return false
	}
	jsonBytes, err := json.Marshal(doc)
	if err != nil {
		p.Add("manifest", "cannot be converted to JSON: %v", err)
		return false
	}
	strictErrs, err := kjson.UnmarshalStrict(jsonBytes, v)
	if err != nil {
		p.Add("manifest", "%v", err)
		return false
	}
	for _, e := range strictErrs {
		p.Add("manifest", "%v", e)
	}
	return len(strictErrs) == 0
}
