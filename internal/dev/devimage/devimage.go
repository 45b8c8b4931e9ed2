package devimage

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"runtime"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Image references of the local stack (imported into containerd, never pulled).
const (
	PauseRef    = "localhost/execplane/pause:dev"
	HelperRef   = "localhost/execplane/helper:dev"
	ExecutorRef = "localhost/execplane/executor:dev"
	// UserlandRef is UserlandImage: an executor image without the helper.
	UserlandRef = "localhost/execplane/userland:dev"
)

// Paths and identities inside the images.
const (
	// HelperPath is where the helper lives in the helper and executor images (the chart's
	// helperPath default, the Dockerfile's).
	HelperPath = "/execplane/helper"
	// User is the executor's non-root identity (executor.RunAsUser/RunAsGroup).
	User = "65532:65532"
	// pauseUser is the sandbox's identity: the conventional "nobody" of pause images.
	pauseUser = "65535:65535"
	// Workspace is the executor's working directory (the workspace claim's mount point).
	Workspace = "/workspace"
)

// File is one entry of a layer.
type File struct {
	Path    string      // absolute
	Mode    os.FileMode // permission bits (and os.ModeDir / os.ModeSymlink for the type)
	Content []byte      // regular files
	Link    string      // symlinks
}

// Layer builds an uncompressed-tar layer of files (gzip-compressed by the library when
// written), with every parent directory, sorted, every timestamp zero and owner root.
func Layer(files []File) (v1.Layer, error) {
	entries := map[string]File{}
	for _, f := range files {
		if !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path || f.Path == "/" {
			return nil, fmt.Errorf("devimage: bad path %q", f.Path)
		}
		if _, dup := entries[f.Path]; dup {
			return nil, fmt.Errorf("devimage: %s twice", f.Path)
		}
		entries[f.Path] = f
		for dir := path.Dir(f.Path); dir != "/"; dir = path.Dir(dir) {
			if _, ok := entries[dir]; !ok {
				entries[dir] = File{Path: dir, Mode: os.ModeDir | 0o755}
			}
		}
	}
	names := make([]string, 0, len(entries))
	for p := range entries {
		names = append(names, p)
	}
	slices.Sort(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range names {
		f := entries[p]
		h := &tar.Header{Name: strings.TrimPrefix(p, "/"), Mode: int64(f.Mode.Perm()), Format: tar.FormatPAX}
		if f.Mode&os.ModeSticky != 0 {
			h.Mode |= 0o1000
		}
		switch {
		case f.Mode.IsDir():
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		case f.Mode&os.ModeSymlink != 0:
			h.Typeflag, h.Linkname = tar.TypeSymlink, f.Link
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.Content))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(f.Content); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
}

// image is a single-layer linux image of this machine's architecture with config c.
func image(files []File, c v1.Config) (v1.Image, error) {
	layer, err := Layer(files)
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Config = "linux", runtime.GOARCH, c
	return mutate.ConfigFile(img, cf)
}

func read(p string) ([]byte, error) {
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("devimage: %w", err)
	}
	return data, nil
}

// PauseImage is the sandbox image: pauseBin (a static binary, internal/dev/pause) at /pause.
func PauseImage(pauseBin string) (v1.Image, error) {
	bin, err := read(pauseBin)
	if err != nil {
		return nil, err
	}
	return image([]File{{Path: "/pause", Mode: 0o555, Content: bin}}, v1.Config{User: pauseUser, Entrypoint: []string{"/pause"}})
}

// HelperImage is the helper alone at HelperPath, as the Dockerfile's "helper" target: a
// profile's helperImage, whose init container installs the helper into any executor image.
func HelperImage(helperBin string) (v1.Image, error) {
	bin, err := read(helperBin)
	if err != nil {
		return nil, err
	}
	return image([]File{{Path: HelperPath, Mode: 0o555, Content: bin}}, v1.Config{User: User, Entrypoint: []string{HelperPath}})
}

// ExecutorImage is an example executor image: the userland of UserlandImage, the helper at
// HelperPath, and the entrypoint the executor Pod runs (helper --pause), as the Dockerfile's
// "executor-example" target on a smaller userland.
func ExecutorImage(helperBin, busyboxBin string, applets []string) (v1.Image, error) {
	helper, err := read(helperBin)
	if err != nil {
		return nil, err
	}
	files, err := userland(busyboxBin, applets)
	if err != nil {
		return nil, err
	}
	files = append(files, File{Path: HelperPath, Mode: 0o555, Content: helper})
	return image(files, v1.Config{
		User: User, WorkingDir: Workspace, Entrypoint: []string{HelperPath, "--pause"},
		Env: []string{"PATH=/bin"},
	})
}

// UserlandImage is an executor image without the helper — any image an operator brings —
// for a profile whose helperImage installs the helper: busybox (a static binary) at
// /bin/busybox with a link per applet, a passwd and group naming the non-root user, the
// workspace and /tmp mount points.
func UserlandImage(busyboxBin string, applets []string) (v1.Image, error) {
	files, err := userland(busyboxBin, applets)
	if err != nil {
		return nil, err
	}
	return image(files, v1.Config{User: User, WorkingDir: Workspace, Env: []string{"PATH=/bin"}})
}

func userland(busyboxBin string, applets []string) ([]File, error) {
	busybox, err := read(busyboxBin)
	if err != nil {
		return nil, err
	}
	files := []File{
		{Path: "/bin/busybox", Mode: 0o555, Content: busybox},
		{Path: "/etc/passwd", Mode: 0o444, Content: []byte("root:x:0:0:root:/root:/bin/sh\nnonroot:x:65532:65532:nonroot:/workspace:/bin/sh\n")},
		{Path: "/etc/group", Mode: 0o444, Content: []byte("root:x:0:\nnonroot:x:65532:\n")},
		{Path: Workspace, Mode: os.ModeDir | 0o755},
		{Path: "/tmp", Mode: os.ModeDir | os.ModeSticky | 0o777},
	}
	seen := map[string]bool{"busybox": true}
	for _, a := range applets {
		if a == "" || strings.Contains(a, "/") || seen[a] {
			continue
		}
		seen[a] = true
		files = append(files, File{Path: "/bin/" + a, Mode: os.ModeSymlink | 0o777, Link: "busybox"})
	}
	return files, nil
}

// Applets lists the applets of a busybox binary (busybox --list).
func Applets(busyboxBin string) ([]string, error) {
	out, err := exec.Command(busyboxBin, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("devimage: %s --list: %w", busyboxBin, err)
	}
	return strings.Fields(string(out)), nil
}

// Write writes images, by reference, into one docker-archive tarball at p (containerd:
// `ctr -n k8s.io images import p`).
func Write(p string, images map[string]v1.Image) error {
	refs := make(map[name.Reference]v1.Image, len(images))
	for ref, img := range images {
		tag, err := name.NewTag(ref, name.StrictValidation)
		if err != nil {
			return fmt.Errorf("devimage: %w", err)
		}
		refs[tag] = img
	}
	return tarball.MultiRefWriteToFile(p, refs)
}

// BusyboxPath is the static busybox of Debian's busybox-static (make node-packages), the
// example executor image's userland.
const BusyboxPath = "/bin/busybox"

// Binaries are the programs the local stack's images are built from.
type Binaries struct {
	// Helper is a static helper (cmd/helper, CGO_ENABLED=0); Pause a static sandbox
	// process (internal/dev/pause); Busybox a static busybox.
	Helper, Pause, Busybox string
}

// WriteStack writes the local stack's images — PauseRef, HelperRef, ExecutorRef and
// UserlandRef — into one archive at p.
func WriteStack(p string, b Binaries) error {
	applets, err := Applets(b.Busybox)
	if err != nil {
		return err
	}
	images := map[string]v1.Image{}
	if images[PauseRef], err = PauseImage(b.Pause); err != nil {
		return err
	}
	if images[HelperRef], err = HelperImage(b.Helper); err != nil {
		return err
	}
	if images[ExecutorRef], err = ExecutorImage(b.Helper, b.Busybox, applets); err != nil {
		return err
	}
	if images[UserlandRef], err = UserlandImage(b.Busybox, applets); err != nil {
		return err
	}
	return Write(p, images)
}
