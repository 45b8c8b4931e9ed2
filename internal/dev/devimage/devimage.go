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
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Image references of the local stack (imported into containerd, never pulled).
const (
	PauseRef    = "localhost/execplane/pause:dev"
	HelperRef   = "localhost/execplane/helper:dev"
	ExecutorRef = "localhost/execplane/executor:dev"
	// UserlandRef is UserlandImage: an executor image without the helper.
	UserlandRef = "localhost/execplane/userland:dev"
	// DebianExecutorRef is the executor image agents use: the helper on DebianUserland
	// (bash, coreutils, python3, pip, git), the development stack's default.
	DebianExecutorRef = "localhost/execplane/executor-debian:dev"
)

// Paths and identities inside the images.
const (
	// HelperPath is where the helper lives in the helper and executor images (the chart's
	// helperPath default, the Dockerfile's).
	HelperPath = "/execplane/helper"
	// User is the executor's non-root identity (executor.RunAsUser/RunAsGroup), and the
	// servers'.
	User = "65532:65532"
	// nonrootID is User's UID and GID, for the files the non-root user owns.
	nonrootID = 65532
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
	// UID and GID own the entry: root (0) unless the non-root user must own it.
	UID, GID int
}

// Layer builds an uncompressed-tar layer of files (gzip-compressed by the library when
// written), with every parent directory (root's, 0755), sorted, every modification time
// mtime (the zero time, the dev stack's images', is written as the Unix epoch). Its media
// type is Docker's, as empty.Image's manifest is (a release's images use OCI's: an executor
// Userland may be built of either, see Userland).
func Layer(files []File, mtime time.Time) (v1.Layer, error) {
	return layer(files, mtime, types.DockerLayer)
}

func layer(files []File, mtime time.Time, mediaType types.MediaType) (v1.Layer, error) {
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
		h := &tar.Header{Name: strings.TrimPrefix(p, "/"), Mode: int64(f.Mode.Perm()), Uid: f.UID, Gid: f.GID, ModTime: mtime, Format: tar.FormatPAX}
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
	// Compressed once and kept: the digest, the layout and the push read the same bytes
	// (ggcr's gzip is deterministic too — compress/gzip, a fixed level, no header time —
	// so the caching saves time, not reproducibility).
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil },
		tarball.WithMediaType(mediaType), tarball.WithCompressedCaching)
}

// stamp is what every layer and configuration of one build carries besides its contents:
// the time of every file, history entry and configuration (zero in the dev stack's images,
// the commit's time in a release's), the configuration's labels, and the media types.
type stamp struct {
	created time.Time
	labels  map[string]string
	// docker gives Docker media types: the dev stack's images, written to a docker-archive,
	// which stores no manifest (its reader, like containerd's import, makes a Docker one).
	// Otherwise OCI's.
	docker bool
}

// devStamp is the dev stack's images'.
var devStamp = stamp{docker: true}

// ociScratch is the empty image a release's images start from, with OCI media types.
var ociScratch = mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)

// scratch is the empty image an image of st starts from.
func (st stamp) scratch() v1.Image {
	if st.docker {
		return empty.Image
	}
	return ociScratch
}

// withLayer adds a layer of files to img, its history entry saying what it holds.
func withLayer(img v1.Image, files []File, createdBy string, st stamp) (v1.Image, error) {
	mediaType := types.OCILayer
	if st.docker {
		mediaType = types.DockerLayer
	}
	l, err := layer(files, st.created, mediaType)
	if err != nil {
		return nil, err
	}
	return mutate.Append(img, mutate.Addendum{Layer: l, History: v1.History{Created: v1.Time{Time: st.created}, CreatedBy: createdBy}})
}

// configure sets img's platform, run configuration (with the stamp's labels) and creation
// time.
func configure(img v1.Image, p v1.Platform, c v1.Config, st stamp) (v1.Image, error) {
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	if len(st.labels) > 0 {
		c.Labels = st.labels
	}
	cf.OS, cf.Architecture, cf.Variant, cf.Config, cf.Created = p.OS, p.Architecture, p.Variant, c, v1.Time{Time: st.created}
	return mutate.ConfigFile(img, cf)
}

// machine is the platform of this machine, the dev stack's images'.
func machine() v1.Platform { return v1.Platform{OS: "linux", Architecture: runtime.GOARCH} }

// image is a single-layer image of this machine's platform with config c (the dev stack's).
func image(files []File, createdBy string, c v1.Config) (v1.Image, error) {
	img, err := withLayer(devStamp.scratch(), files, createdBy, devStamp)
	if err != nil {
		return nil, err
	}
	return configure(img, machine(), c, devStamp)
}

// FilesImage is image for other packages: a single-layer image of this machine's platform
// holding files, run with c, stamped as the dev stack's images are (the local cluster's DNS
// server's, internal/dev/devcluster).
func FilesImage(files []File, createdBy string, c v1.Config) (v1.Image, error) {
	return image(files, createdBy, c)
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
	return image([]File{{Path: "/pause", Mode: 0o555, Content: bin}}, "COPY pause /pause", v1.Config{User: pauseUser, Entrypoint: []string{"/pause"}})
}

// HelperImage is the helper alone at HelperPath, as the Dockerfile's "helper" target: a
// profile's helperImage, whose init container installs the helper into any executor image.
func HelperImage(helperBin string) (v1.Image, error) {
	bin, err := read(helperBin)
	if err != nil {
		return nil, err
	}
	return image(helperFiles(bin, HelperInstallMode), "COPY helper "+HelperPath, helperConfig())
}

// The helper's file modes. In an executor it is execute-only: a binary its process cannot
// read makes the kernel mark that process not dumpable at exec, before any of its code runs,
// so that no process of the workload (the same user) ever opens its /proc descriptors or
// memory (docs/commands.md "Sealed records"). In the helper image it is also readable: its
// --install reads itself to copy into an executor, and writes the copy execute-only.
const (
	HelperExecMode    = 0o111
	HelperInstallMode = 0o555
)

func helperFiles(bin []byte, mode os.FileMode) []File {
	return []File{{Path: HelperPath, Mode: mode, Content: bin}}
}

func helperConfig() v1.Config { return v1.Config{User: User, Entrypoint: []string{HelperPath}} }

// ExecutorImage is an example executor image: the userland of UserlandImage, the helper at
// HelperPath, and the entrypoint the executor Pod runs (helper --pause), as the Dockerfile's
// "executor-example" target on a smaller userland.
func ExecutorImage(helperBin, busyboxBin string, applets []string) (v1.Image, error) {
	helper, err := read(helperBin)
	if err != nil {
		return nil, err
	}
	userland, err := UserlandImage(busyboxBin, applets)
	if err != nil {
		return nil, err
	}
	return executor(userland, helper, machine(), devStamp)
}

// UserlandImage is an executor image without the helper — any image an operator brings —
// for a profile whose helperImage installs the helper: busybox (a static binary) at
// /bin/busybox with a link per applet, a passwd and group naming the non-root user, the
// workspace and /tmp mount points.
func UserlandImage(busyboxBin string, applets []string) (v1.Image, error) {
	return busyboxUserland(busyboxBin, applets, machine(), devStamp)
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
	// DebianLock, when set, is the lock of DebianUserland's packages (debroot.LockPath,
	// fetched by make executor-debs): the archive then holds DebianExecutorRef too.
	DebianLock string
}

// WriteStack writes the local stack's images — PauseRef, HelperRef, ExecutorRef,
// UserlandRef and, with b.DebianLock, DebianExecutorRef — into one archive at p.
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
	if b.DebianLock != "" {
		helper, err := read(b.Helper)
		if err != nil {
			return err
		}
		userland, err := DebianUserland(b.DebianLock)(machine(), devStamp.created)
		if err != nil {
			return err
		}
		if images[DebianExecutorRef], err = executor(userland, helper, machine(), devStamp); err != nil {
			return err
		}
	}
	return Write(p, images)
}
