package main

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestHelperIsStatic proves the helper binary has no dynamic section and no interpreter, so
// it runs in any executor image. It checks $EXECPLANE_HELPER_BIN (make test sets it to
// bin/helper, the artefact `make build` produced) or builds one the way the Makefile does.
func TestHelperIsStatic(t *testing.T) {
	path := os.Getenv("EXECPLANE_HELPER_BIN")
	if path == "" {
		path = filepath.Join(t.TempDir(), "helper")
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", path, ".")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build: %v\n%s", err, out)
		}
	}
	f, err := elf.Open(path)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("%s has program header %v: not static", path, p.Type)
		}
	}
	if s := f.Section(".dynamic"); s != nil {
		t.Errorf("%s has a .dynamic section", path)
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("%s imports %v", path, libs)
	}
}

// TestHelperLinksNoNetworkStack keeps gRPC and net/http out of the helper: they cost start-up
// time on every request and are attack surface in a binary that must never open a socket.
func TestHelperLinksNoNetworkStack(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if dep == "net/http" || strings.HasPrefix(dep, "google.golang.org/grpc") {
			t.Errorf("the helper links %s", dep)
		}
	}
}
