// Package layout_test keeps the package layout honest: the import arrows docs/architecture.md
// draws are the real ones, nothing under pkg/ imports internal/, the gateway links neither
// the store nor the helper's rooms, production never imports development rooms and the
// caller's CLI (cmd/execctl) links none.
package layout_test

import (
	"bufio"
	"bytes"
	"flag"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const module = "github.com/execplane/execplane/"

var update = flag.Bool("update", false, "rewrite the imports block of docs/architecture.md")

// outside are the rooms that stand apart from production: they may import anything, and
// the drawing leaves them out.
var outside = []string{"pkg/generated", "bench", "test", "internal/dev", "cmd", "internal/golden", "internal/security/managertest", "pkg/profile/profiletest"}

func apart(p string) bool {
	return slices.ContainsFunc(outside, func(o string) bool { return p == o || strings.HasPrefix(p, o+"/") })
}

// graph is every project package (relative path) → its direct project imports.
func graph(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", "./...")
	cmd.Dir = root(t)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	g := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		p := strings.TrimPrefix(f[0], module)
		g[p] = nil
		for _, d := range f[1:] {
			if strings.HasPrefix(d, module) {
				g[p] = append(g[p], strings.TrimPrefix(d, module))
			}
		}
		slices.Sort(g[p])
	}
	if len(g) < 20 {
		t.Fatalf("go list found only %d packages", len(g))
	}
	return g
}

func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// deps returns every project package p reaches (transitively).
func deps(g map[string][]string, p string) map[string]bool {
	seen := map[string]bool{}
	var walk func(string)
	walk = func(p string) {
		for _, d := range g[p] {
			if !seen[d] {
				seen[d] = true
				walk(d)
			}
		}
	}
	walk(p)
	return seen
}

func TestPkgImportsNoInternal(t *testing.T) {
	g := graph(t)
	for p := range g {
		if !strings.HasPrefix(p, "pkg/") || apart(p) {
			continue
		}
		for d := range deps(g, p) {
			if strings.HasPrefix(d, "internal/") {
				t.Errorf("%s reaches %s: pkg/ must stand alone", p, d)
			}
		}
	}
}

func TestGatewayLinksNeitherStoreNorHelperRooms(t *testing.T) {
	g := graph(t)
	for d := range deps(g, "internal/gateway") {
		if d == "pkg/store" || strings.HasPrefix(d, "internal/helper") {
			t.Errorf("internal/gateway reaches %s", d)
		}
	}
}

func TestProductionImportsNoDevelopmentRoom(t *testing.T) {
	g := graph(t)
	for p, ds := range g {
		if apart(p) {
			continue
		}
		for _, d := range ds {
			if apart(d) && !strings.HasPrefix(d, "pkg/generated") {
				t.Errorf("%s imports %s", p, d)
			}
		}
	}
}

// The binaries operators and callers install — execctl, the gateway, the controller, the
// helper — link nothing of the development stack (that is execplane-dev's). cmd stands
// apart, so the test above does not see a main's own imports: this walks everything each
// binary links.
func TestCallerCLILinksNoDevelopmentRoom(t *testing.T) {
	g := graph(t)
	if _, ok := g["cmd/execctl"]; !ok {
		t.Fatal("go list found no cmd/execctl")
	}
	// Every installed binary: all of cmd/ but the development stack's own.
	for p := range g {
		if !strings.HasPrefix(p, "cmd/") || p == "cmd/execplane-dev" {
			continue
		}
		for _, d := range slices.Sorted(maps.Keys(deps(g, p))) {
			if d == "internal/dev" || strings.HasPrefix(d, "internal/dev/") {
				t.Errorf("%s reaches %s", p, d)
			}
		}
	}
}

const (
	docPath    = "docs/architecture.md"
	beginBlock = "<!-- imports:begin -->"
	endBlock   = "<!-- imports:end -->"
)

// drawn renders the production arrows as the doc shows them.
func drawn(g map[string][]string) string {
	var names []string
	for p := range g {
		if !apart(p) {
			names = append(names, p)
		}
	}
	slices.Sort(names)
	var b strings.Builder
	b.WriteString("```\n")
	for _, p := range names {
		var to []string
		for _, d := range g[p] {
			if !apart(d) {
				to = append(to, d)
			}
		}
		line := "(nothing of the project)"
		if len(to) > 0 {
			line = strings.Join(to, ", ")
		}
		b.WriteString(p + " → " + line + "\n")
	}
	b.WriteString("```\n")
	return b.String()
}

func TestArchitectureDrawsTheRealImports(t *testing.T) {
	path := filepath.Join(root(t), docPath)
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	i, j := strings.Index(text, beginBlock), strings.Index(text, endBlock)
	if i < 0 || j < i {
		t.Fatalf("%s has no %s … %s block", docPath, beginBlock, endBlock)
	}
	want := drawn(graph(t))
	got := strings.TrimPrefix(text[i+len(beginBlock):j], "\n")
	if *update {
		text = text[:i+len(beginBlock)] + "\n" + want + text[j:]
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("%s's imports block is stale; run go test ./test/layout -update (-real +drawn):\n%s", docPath, diff)
	}
}

// The gateway's backlog accounting counts an answer out as DATA frames carry it
// (internal/backlog): it assumes answers travel uncompressed, so the gateway links no gRPC
// compressor (linking one registers it). With one, compressed answers would stay counted
// until their streams end.
func TestGatewayLinksNoCompressor(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "../../cmd/gateway").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if p == "google.golang.org/grpc/encoding/gzip" || strings.Contains(p, "grpc-compress") {
			t.Errorf("the gateway links %s", p)
		}
	}
}
