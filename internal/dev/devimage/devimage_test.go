package devimage

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
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

// entries reads img's file system (its layers flattened), failing on any entry whose
// modification time is not mtime (the zero time: the Unix epoch).
func entries(t *testing.T, img v1.Image, mtime time.Time) map[string]entry {
	t.Helper()
	if mtime.IsZero() {
		mtime = time.Unix(0, 0)
	}
	rc := mutate.Extract(img)
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
		if !h.ModTime.Equal(mtime) {
			t.Errorf("%s: modified %s, not %s: not reproducible", h.Name, h.ModTime.UTC(), mtime.UTC())
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

// executorFS is the file system of an executor image on the busybox userland of applets.
func executorFS(helper, busybox string) map[string]entry {
	fs := map[string]entry{
		"/bin":              {Type: tar.TypeDir, Mode: 0o755},
		"/bin/busybox":      {Type: tar.TypeReg, Mode: 0o555, Content: busybox},
		"/etc":              {Type: tar.TypeDir, Mode: 0o755},
		"/etc/group":        {Type: tar.TypeReg, Mode: 0o444, Content: "root:x:0:\nnonroot:x:65532:\n"},
		"/etc/passwd":       {Type: tar.TypeReg, Mode: 0o444, Content: "root:x:0:0:root:/root:/bin/sh\nnonroot:x:65532:65532:nonroot:/workspace:/bin/sh\n"},
		"/execplane":        {Type: tar.TypeDir, Mode: 0o755},
		"/execplane/helper": {Type: tar.TypeReg, Mode: 0o111, Content: helper},
		"/tmp":              {Type: tar.TypeDir, Mode: 0o1777},
		"/workspace":        {Type: tar.TypeDir, Mode: 0o755},
	}
	for _, a := range applets {
		fs["/bin/"+a] = entry{Type: tar.TypeSymlink, Mode: 0o777, Link: "busybox"}
	}
	return fs
}

// The executor image is its userland, then the helper in a layer of its own (shared with
// the userland image's layer in containerd), run as the executor Pod runs it.
func TestExecutorImageContents(t *testing.T) {
	all := images(t)
	img := all[ExecutorRef]
	if diff := cmp.Diff(executorFS("helper-binary", "busybox-binary"), entries(t, img, time.Time{})); diff != "" {
		t.Fatalf("executor image (-want +got):\n%s", diff)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	userland, err := all[UserlandRef].Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 2 || len(userland) != 1 || digest(t, layers[0]) != digest(t, userland[0]) {
		t.Fatalf("the executor's layers are not the userland's and the helper's: %d layers", len(layers))
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	want := v1.Config{User: "65532:65532", WorkingDir: "/workspace", Entrypoint: []string{"/execplane/helper", "--pause"}, Env: []string{"PATH=/bin"}}
	if diff := cmp.Diff(want, cf.Config); diff != "" || cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		t.Fatalf("config of %s/%s (-want +got):\n%s", cf.OS, cf.Architecture, diff)
	}
}

func digest(t *testing.T, l v1.Layer) v1.Hash {
	t.Helper()
	h, err := l.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// The userland image is the executor image without the helper — nothing under /execplane —
// and without an entrypoint: a profile's helperImage brings both.
func TestUserlandImageHasNoHelper(t *testing.T) {
	all := images(t)
	executor, userland := entries(t, all[ExecutorRef], time.Time{}), entries(t, all[UserlandRef], time.Time{})
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
		if _, err := Layer(files, time.Time{}); err == nil {
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
	got := entries(t, img, time.Time{})
	if e := got["/bin/sh"]; e.Type != tar.TypeSymlink || e.Link != "busybox" {
		t.Fatalf("/bin/sh: %+v", e)
	}
	if want, _ := os.ReadFile(busybox); got["/bin/busybox"].Content != string(want) {
		t.Fatal("the image's busybox differs from the machine's")
	}
}
