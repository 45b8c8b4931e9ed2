package devcmd

import (
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"

	"github.com/execplane/execplane/internal/cli"
	"github.com/execplane/execplane/internal/dev/precondition"
)

// imageInputs writes stand-ins for the static programs (DIR/linux_<arch>/…, this machine's
// arch: the busybox userland serves it alone) and a busybox that lists two applets.
func imageInputs(t *testing.T) (binDir, busybox string) {
	t.Helper()
	binDir = t.TempDir()
	sub := filepath.Join(binDir, "linux_"+runtime.GOARCH)
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"gateway", "controller", "helper", "e2b"} {
		if err := os.WriteFile(filepath.Join(sub, p), []byte(p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	busybox = filepath.Join(binDir, "busybox")
	if err := os.WriteFile(busybox, []byte("#!/bin/sh\necho sh ls\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return binDir, busybox
}

// `images` writes a layout per image and prints a line each, the same twice; with --push
// it prints the pushed references. Bad flags are usage errors, every problem named.
func TestImages(t *testing.T) {
	if _, err := os.Stat("/bin/sh"); err != nil {
		precondition.Missing(t, "no /bin/sh for the stand-in busybox")
	}
	t.Setenv("DOCKER_CONFIG", t.TempDir()) // no credentials of this machine's
	t.Setenv("SOURCE_DATE_EPOCH", "1796362643")
	binDir, busybox := imageInputs(t)
	out := filepath.Join(t.TempDir(), "images")
	platform := "linux/" + runtime.GOARCH
	args := []string{"images", "--bin", binDir, "--userland", "busybox", "--busybox", busybox, "--out", out, "--platforms", platform, "--version", "v1", "--commit", "abc"}
	first, stderr, code := execplaneDev(t, args...)
	if code != cli.ExitOK {
		t.Fatalf("exit %d\n%s%s", code, first, stderr)
	}
	lines := strings.Split(strings.TrimSpace(first), "\n")
	names := []string{"gateway", "controller", "helper", "executor", "e2b"}
	for i, name := range names {
		if len(lines) != len(names) || !strings.HasPrefix(lines[i], name+" ") || !strings.Contains(lines[i], " "+platform+" ") || !strings.Contains(lines[i], " sha256:") {
			t.Fatalf("output:\n%s", first)
		}
		if _, err := os.Stat(filepath.Join(out, name, "index.json")); err != nil {
			t.Fatal(err)
		}
	}
	if again, _, _ := execplaneDev(t, args...); again != first {
		t.Fatalf("a second run printed\n%s\nthe first\n%s", again, first)
	}

	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	reg := strings.TrimPrefix(srv.URL, "http://") + "/execplane"
	pushed, stderr, code := execplaneDev(t, append(args, "--push", reg)...)
	if code != cli.ExitOK || strings.Count(pushed, "pushed "+reg+"/") != len(names) || !strings.Contains(pushed, reg+"/gateway:v1@sha256:") || !strings.HasPrefix(pushed, first) {
		t.Fatalf("exit %d\n%s%s", code, pushed, stderr)
	}

	_, stderr, code = execplaneDev(t, "images", "--platforms", "darwin/arm64", "--created", "yesterday", "--bin", binDir, "--userland", "alpine")
	for _, want := range []string{"--platforms", "darwin/arm64", "--created", `"yesterday"`, "--userland", `"alpine"`} {
		if code != cli.ExitUsage || !strings.Contains(stderr, want) {
			t.Errorf("exit %d, want %d; stderr should hold %q:\n%s", code, cli.ExitUsage, want, stderr)
		}
	}
	if _, stderr, code = execplaneDev(t, "images", "--bin", binDir); code != cli.ExitUsage || !strings.Contains(stderr, "not an image tag") || !strings.Contains(stderr, "no commit") {
		t.Errorf("without a version and a commit: exit %d\n%s", code, stderr)
	}
}
