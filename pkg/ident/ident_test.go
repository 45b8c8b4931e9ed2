package ident

import (
	"go/parser"
	"go/token"
	"strings"
	"testing"
)

func TestForms(t *testing.T) {
	for _, c := range []struct {
		name string
		ok   bool
		got  bool
	}{
		{"identifier", true, IsIdentifier("conv:42.a_b-c")},
		{"identifier leading dot", false, IsIdentifier(".x")},
		{"identifier slash", false, IsIdentifier("a/b")},
		{"identifier too long", false, IsIdentifier(strings.Repeat("a", 129))},
		{"dns label", true, IsDNSLabel("xenv-0a1b")},
		{"dns label upper", false, IsDNSLabel("Xenv")},
		{"dns label trailing dash", false, IsDNSLabel("a-")},
		{"uuid", true, IsUUID("0a1b2c3d-0000-4000-8000-00000000000a")},
		{"uuid upper", false, IsUUID("0A1B2C3D-0000-4000-8000-00000000000A")},
		{"uuid no dashes", false, IsUUID("0a1b2c3d000040008000000000000000000a")},
		{"printable", true, IsPrintableASCII("https://issuer", 256)},
		{"printable space", false, IsPrintableASCII("a b", 256)},
		{"printable empty", false, IsPrintableASCII("", 256)},
	} {
		if c.got != c.ok {
			t.Errorf("%s: got %v", c.name, c.got)
		}
	}
}

// The checks run inside the grant verifier, which performs no I/O: this package imports
// nothing at all.
func TestImportsNothing(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "ident.go", nil, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Imports) != 0 {
		t.Fatalf("ident.go imports %d packages", len(f.Imports))
	}
}
