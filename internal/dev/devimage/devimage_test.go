package devimage

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/execplane/execplane/internal/dev/precondition"
)

// inputs writes stand-ins for the binaries an image carries.
func inputs(t *testing.T) (helper, busybox, pause string) {
	t.Helper()
	dir := t.TempDir()
	for name, content := range map[string]string{"helper": "helper-binary", "busybox": "busybox-binary", "pause": "pause-binary"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "helper"), filepath.Join(dir, "busybox"), filepath.Join(dir, "pause")
}

var applets = []string{"sh", "ls", "cat", "id", "sleep", "dd"}

func images(t *testing.T) map[string]v1.Image {
	t.Helper()
	helper, busybox, pause := inputs(t)
	out := map[string]v1.Image{}
	var err error
	if out[PauseRef], err = PauseImage(pause); err != nil {
		t.Fatal(err)
	}
	if out[HelperRef], err = HelperImage(helper); err != nil {
		t.Fatal(err)
	}
	if out[ExecutorRef], err = ExecutorImage(helper, busybox, applets); err != nil {
		t.Fatal(err)
	}
	if out[UserlandRef], err = UserlandImage(busybox, applets); err != nil {
		t.Fatal(err)
	}
	return out
}

// entry is one tar entry as a test compares it.
type entry struct {
	Type     byte
	Mode     int64
	UID, GID int
	Link     string
	Content  string
}

func entries(t *testing.T, img v1.Image) map[string]entry {
	t.Helper()
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers: %d %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	out := map[string]entry{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		if !h.ModTime.IsZero() && h.ModTime.Unix() != 0 {
			t.Errorf("%s: a timestamp (%s): not reproducible", h.Name, h.ModTime)
		}
		out["/"+strings.TrimSuffix(h.Name, "/")] = entry{Type: h.Typeflag, Mode: h.Mode, UID: h.Uid, GID: h.Gid, Link: h.Linkname, Content: string(data)}
	}
}

// The same inputs give the same digests: nothing of the build time or order leaks in.
func TestImagesAreReproducible(t *testing.T) {
	a, b := images(t), images(t)
	for ref := range a {
		da, err := a[ref].Digest()
		if err != nil {
			t.Fatal(err)
		}
		db, _ := b[ref].Digest()
		if da != db {
			t.Errorf("%s: %s then %s", ref, da, db)
		}
	}
}

func TestExecutorImageContents(t *testing.T) {
	img := images(t)[ExecutorRef]
	got := entries(t, img)
	want := map[string]entry{
		"/bin":              {Type: tar.TypeDir, Mode: 0o755},
		"/bin/busybox":      {Type: tar.TypeReg, Mode: 0o555, Content: "busybox-binary"},
		"/etc":              {Type: tar.TypeDir, Mode: 0o755},
		"/etc/group":        {Type: tar.TypeReg, Mode: 0o444, Content: "root:x:0:\nnonroot:x:65532:\n"},
		"/etc/passwd":       {Type: tar.TypeReg, Mode: 0o444, Content: "root:x:0:0:root:/root:/bin/sh\nnonroot:x:65532:65532:nonroot:/workspace:/bin/sh\n"},
		"/execplane":        {Type: tar.TypeDir, Mode: 0o755},
		"/execplane/helper": {Type: tar.TypeReg, Mode: 0o555, Content: "helper-binary"},
		"/tmp":              {Type: tar.TypeDir, Mode: 0o1777},
		"/workspace":        {Type: tar.TypeDir, Mode: 0o755},
	}
	for _, a := range applets {
		want["/bin/"+a] = entry{Type: tar.TypeSymlink, Mode: 0o777, Link: "busybox"}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("executor image layer (-want +got):\n%s", diff)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture == "" || cf.Config.User != "65532:65532" || cf.Config.WorkingDir != "/workspace" {
		t.Fatalf("config: %+v", cf)
	}
}

// The userland image is the executor image without the helper — nothing under /execplane —
// and without an entrypoint: a profile's helperImage brings both.
func TestUserlandImageHasNoHelper(t *testing.T) {
	all := images(t)
	executor, userland := entries(t, all[ExecutorRef]), entries(t, all[UserlandRef])
	delete(executor, "/execplane")
	delete(executor, HelperPath)
	if diff := cmp.Diff(executor, userland); diff != "" {
		t.Fatalf("userland image vs the executor image without the helper (-want +got):\n%s", diff)
	}
	cf, err := all[UserlandRef].ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if len(cf.Config.Entrypoint) != 0 || cf.Config.User != User {
		t.Fatalf("config: %+v", cf.Config)
	}
}

// Refused before anything is written: a relative or unclean path, the root, a duplicate.
func TestLayerRefusesBadEntries(t *testing.T) {
	for _, files := range [][]File{
		{{Path: "bin/sh"}}, {{Path: "/bin/../etc"}}, {{Path: "/"}}, {{Path: "/a"}, {Path: "/a"}},
	} {
		if _, err := Layer(files); err == nil {
			t.Errorf("%v accepted", files)
		}
	}
}

// The docker-archive holds every image under its reference and reads back identical.
func TestWriteRoundTrips(t *testing.T) {
	imgs := images(t)
	path := filepath.Join(t.TempDir(), "images.tar")
	if err := Write(path, imgs); err != nil {
		t.Fatal(err)
	}
	for ref, img := range imgs {
		tag, err := name.NewTag(ref)
		if err != nil {
			t.Fatal(err)
		}
		back, err := tarball.ImageFromPath(path, &tag)
		if err != nil {
			t.Fatalf("%s: %v", ref, err)
		}
		want, _ := img.Digest()
		if got, _ := back.Digest(); got != want {
			t.Errorf("%s: %s read back as %s", ref, want, got)
		}
	}
	if err := Write(path, map[string]v1.Image{"Not A Reference": imgs[PauseRef]}); err == nil {
		t.Error("a malformed reference was written")
	}
}

// stage returns the instructions of one target of the Dockerfile.
func stage(t *testing.T, target string) []string {
	t.Helper()
	data, err := os.ReadFile("../../../deploy/images/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	in := false
	for line := range strings.SplitSeq(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == "FROM" {
			in = len(f) == 4 && strings.EqualFold(f[2], "AS") && f[3] == target
			continue
		}
		if in && len(f) > 0 && !strings.HasPrefix(f[0], "#") {
			out = append(out, strings.TrimSpace(line))
		}
	}
	if len(out) == 0 {
		t.Fatalf("no %s target in the Dockerfile", target)
	}
	return out
}

// instruction returns the argument of the stage's last instruction op ("" when absent).
func instruction(lines []string, op string) string {
	arg := ""
	for _, l := range lines {
		if rest, ok := strings.CutPrefix(l, op+" "); ok {
			arg = strings.TrimSpace(rest)
		}
	}
	return arg
}

func jsonArray(t *testing.T, s string) []string {
	t.Helper()
	var out []string
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return out
}

// The images built here and deploy/images/Dockerfile's targets agree on what matters to the
// executor Pod: the helper's path and mode, the user, the working directory, the entrypoint.
func TestImagesMatchTheDockerfile(t *testing.T) {
	imgs := images(t)
	for target, ref := range map[string]string{"helper": HelperRef, "executor-example": ExecutorRef} {
		lines := stage(t, target)
		cf, err := imgs[ref].ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		type shape struct {
			User, WorkingDir string
			Entrypoint       []string
			HelperCopy       bool
			HelperMode       int64
		}
		want := shape{User: instruction(lines, "USER"), WorkingDir: instruction(lines, "WORKDIR"),
			Entrypoint: jsonArray(t, instruction(lines, "ENTRYPOINT")),
			HelperCopy: strings.HasSuffix(instruction(lines, "COPY"), "/out/helper "+HelperPath) && strings.Contains(instruction(lines, "COPY"), "--chmod=0555"),
			HelperMode: 0o555}
		got := shape{User: cf.Config.User, WorkingDir: cf.Config.WorkingDir, Entrypoint: cf.Config.Entrypoint,
			HelperCopy: true, HelperMode: entries(t, imgs[ref])[HelperPath].Mode}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: (-Dockerfile +built):\n%s", target, diff)
		}
	}
}

// With the machine's static busybox (hack/install-node-packages.sh installs busybox-static):
// its applets are listed, a shell among them, and the executor image carries the binary and
// a link for each.
func TestExecutorImageFromTheMachinesBusybox(t *testing.T) {
	const busybox = "/bin/busybox"
	if _, err := os.Stat(busybox); err != nil {
		precondition.Missing(t, "no static busybox at %s (hack/install-node-packages.sh installs busybox-static)", busybox)
	}
	list, err := Applets(busybox)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(list, "sh") || !slices.Contains(list, "id") || len(list) < 100 {
		t.Fatalf("%d applets: %v", len(list), list)
	}
	helper, _, _ := inputs(t)
	img, err := ExecutorImage(helper, busybox, list)
	if err != nil {
		t.Fatal(err)
	}
	got := entries(t, img)
	if e := got["/bin/sh"]; e.Type != tar.TypeSymlink || e.Link != "busybox" {
		t.Fatalf("/bin/sh: %+v", e)
	}
	if want, _ := os.ReadFile(busybox); got["/bin/busybox"].Content != string(want) {
		t.Fatal("the image's busybox differs from the machine's")
	}
}
