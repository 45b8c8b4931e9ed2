package grant

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestVerifierImportsNoIO proves the package's no-I/O invariant structurally: its non-test
// files import nothing that can open a file, a socket or a process, so no kid, jku or x5u
// can ever make it reach one. A new import must be added here deliberately.
func TestVerifierImportsNoIO(t *testing.T) {
	allowed := map[string]bool{
		"bytes":                        true, // in-memory buffers only
		"crypto/ed25519":               true,
		"crypto/rand":                  true, // jti entropy from the kernel's CSPRNG, never a file path
		"crypto/sha256":                true,
		"crypto/subtle":                true,
		"encoding/base64":              true,
		"encoding/hex":                 true,
		"encoding/json":                true, // strict decoding of in-memory header and payload bytes
		"io":                           true, // io.EOF only: the end of an in-memory decoder's input
		"errors":                       true,
		"fmt":                          true,
		"slices":                       true,
		"strings":                      true,
		"time":                         true,
		"github.com/golang-jwt/jwt/v5": true, // its parser only decodes; key lookup is our Keyfunc
		"github.com/execplane/execplane/pkg/apierror": true, // the error vocabulary: values, no I/O
		"github.com/execplane/execplane/pkg/ident":    true, // pure loops over bytes; its own test keeps it import-free
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if !allowed[path] {
				t.Errorf("%s imports %q, outside the no-I/O allowlist", name, path)
			}
		}
	}
}
