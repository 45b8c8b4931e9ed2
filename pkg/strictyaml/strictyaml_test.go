package strictyaml

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestDocument(t *testing.T) {
	got, err := Document([]byte("a: 1\nb: [x, {c: 2.5}]\nd: 2026-11-29T00:00:00Z\n"), "doc")
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(got)
	if string(data) != `{"a":1,"b":["x",{"c":2.5}],"d":"2026-11-29T00:00:00Z"}` {
		t.Fatalf("got %s", data)
	}
	if v, err := Document(nil, "doc"); v != nil || err != nil {
		t.Fatalf("empty input: %v %v", v, err)
	}
}

func TestDocumentRefuses(t *testing.T) {
	cases := map[string]string{
		"duplicate key":   "a: 1\na: 2\n",
		"second document": "a: 1\n---\nb: 2\n",
		"non-string key":  "1: x\n",
		"nested int key":  "a:\n  2: x\n",
		"infinite number": "a: .inf\n",
		"not a number":    "a: .nan\n",
		"malformed":       "a: [\n",
	}
	for name, in := range cases {
		if _, err := Document([]byte(in), "doc"); err == nil || !strings.HasPrefix(err.Error(), "doc") && !strings.HasPrefix(err.Error(), "a") {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}
