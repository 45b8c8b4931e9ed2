// Package strictyaml parses operator-written YAML (profiles, the security manifest) strictly,
// for decoding into typed structs with sigs.k8s.io/json's strict mode.
//
// Invariants:
//   - Exactly one document: a second one is an error, never silently ignored (as
//     sigs.k8s.io/yaml does).
//   - Duplicate keys are refused (yaml.v2 strict mode), and every mapping key must be a
//     string, so keys such as 1 and "1" cannot merge when converted to JSON.
//   - Only finite numbers; the result marshals with encoding/json as the same document.
package strictyaml

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"

	"go.yaml.in/yaml/v2"
)

// Document parses exactly one YAML document and converts it to JSON-compatible values. An
// empty input yields nil. root names the document in errors ("manifest", "document").
func Document(data []byte, root string) (any, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.SetStrict(true)
	var doc any
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, fmt.Errorf("%s: %w", root, err)
	}
	var extra any
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: more than one YAML document", root)
	}
	return toJSONValue(doc, root, "")
}

// toJSONValue converts a value decoded by yaml.v2 into one encoding/json marshals as the same
// document. yaml.v2 keeps timestamps as strings when decoding into interface values, so dates
// reach the JSON decoder as RFC 3339 text.
func toJSONValue(v any, root, path string) (any, error) {
	at := path
	if at == "" {
		at = root
	}
	switch v := v.(type) {
	case map[any]any:
		out := make(map[string]any, len(v))
		for k, val := range v {
			ks, ok := k.(string)
			if !ok {
				return nil, fmt.Errorf("%s: mapping key %v is a %T, not a string (quote it)", at, k, k)
			}
			child := ks
			if path != "" {
				child = path + "." + ks
			}
			c, err := toJSONValue(val, root, child)
			if err != nil {
				return nil, err
			}
			out[ks] = c
		}
		return out, nil
	case []any:
		out := make([]any, len(v))
		for i, val := range v {
			c, err := toJSONValue(val, root, fmt.Sprintf("%s[%d]", at, i))
			if err != nil {
				return nil, err
			}
			out[i] = c
		}
		return out, nil
	case float64:
		if math.IsInf(v, 0) || math.IsNaN(v) {
			return nil, fmt.Errorf("%s: %v is not a finite number", at, v)
		}
		return v, nil
	case nil, string, bool, int, int64, uint64:
		return v, nil
	default:
		return nil, fmt.Errorf("%s: unsupported YAML value of type %T", at, v)
	}
}
