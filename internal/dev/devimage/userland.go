package devimage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/execplane/execplane/internal/dev/debroot"
)

// ErrNoUserland marks a platform a Userland has nothing for: a release builds its executor
// image for the other platforms.
var ErrNoUserland = errors.New("no userland for this platform")

// A Userland builds the file system an executor image runs on, for one platform: every
// layer and environment variable of the executor image but the helper's, its files' and
// history's times at created so that the executor image is reproducible. For a platform it
// has nothing for it returns an error wrapping ErrNoUserland.
//
// The executor image is the userland's layers (under the release's media types: a userland
// may be built with Docker's or OCI's), the helper at HelperPath and the executor Pod's run
// settings (User, Workspace, `helper --pause`); only the userland's Env is kept of its
// configuration.
type Userland func(p v1.Platform, created time.Time) (v1.Image, error)

// BusyboxUserland is the example executor's userland: the static busybox at busyboxBin
// (BusyboxPath, Debian's busybox-static) with a link per applet. Its applets are listed by
// running it, so it serves this machine's platform alone.
func BusyboxUserland(busyboxBin string) Userland {
	return func(p v1.Platform, created time.Time) (v1.Image, error) {
		if m := machine(); p.OS != m.OS || p.Architecture != m.Architecture || p.Variant != "" {
			return nil, fmt.Errorf("devimage: busybox userland %s for %s: %w (it is this machine's busybox, %s)", busyboxBin, p, ErrNoUserland, m)
		}
		applets, err := Applets(busyboxBin)
		if err != nil {
			return nil, err
		}
		return busyboxUserland(busyboxBin, applets, p, stamp{created: created})
	}
}

// busyboxUserland is busybox at /bin/busybox with a link per applet, a passwd and group
// naming the non-root user, the workspace and /tmp mount points; run as the executor Pod
// runs it, without an entrypoint.
func busyboxUserland(busyboxBin string, applets []string, p v1.Platform, st stamp) (v1.Image, error) {
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
	img, err := withLayer(st.scratch(), files, "busybox userland: /bin/busybox and its applets, passwd, group, /workspace, /tmp", st)
	if err != nil {
		return nil, err
	}
	return configure(img, p, v1.Config{User: User, WorkingDir: Workspace, Env: []string{"PATH=/bin"}}, st)
}

// executor is an executor image: userland, the helper at HelperPath in a layer of its own,
// and the entrypoint the executor Pod runs (helper --pause) as the non-root user in the
// workspace — the Dockerfile's "executor-example" on any userland.
func executor(userland v1.Image, helper []byte, p v1.Platform, st stamp) (v1.Image, error) {
	cf, err := userland.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("devimage: the userland's configuration: %w", err)
	}
	if cf.OS != p.OS || cf.Architecture != p.Architecture || cf.Variant != p.Variant {
		return nil, fmt.Errorf("devimage: the userland is for %s/%s, the executor image for %s", cf.OS, cf.Architecture, p)
	}
	img, err := rebase(userland, cf, st)
	if err != nil {
		return nil, err
	}
	if img, err = withLayer(img, helperFiles(helper, HelperExecMode), "COPY helper "+HelperPath, st); err != nil {
		return nil, err
	}
	return configure(img, p, executorConfig(cf.Config.Env), st)
}

// rebase is userland's layers and history on st's empty image, each layer under st's
// family of media types — the same bytes, digests and diff IDs — so that a userland built
// with Docker's media types (empty.Image, Layer) and an OCI release do not mix in one
// manifest, which some registries and runtimes refuse.
func rebase(userland v1.Image, cf *v1.ConfigFile, st stamp) (v1.Image, error) {
	layers, err := userland.Layers()
	if err != nil {
		return nil, fmt.Errorf("devimage: the userland's layers: %w", err)
	}
	var history []v1.History
	for _, h := range cf.History {
		if !h.EmptyLayer {
			history = append(history, h)
		}
	}
	if len(history) != len(layers) {
		history = make([]v1.History, len(layers))
		for i := range history {
			history[i] = v1.History{Created: v1.Time{Time: st.created}, CreatedBy: "userland"}
		}
	}
	img := st.scratch()
	for i, l := range layers {
		mt, err := l.MediaType()
		if err != nil {
			return nil, err
		}
		if mt, err = layerMediaType(mt, st); err != nil {
			return nil, fmt.Errorf("devimage: the userland's layer %d: %w", i, err)
		}
		if img, err = mutate.Append(img, mutate.Addendum{Layer: l, History: history[i], MediaType: mt}); err != nil {
			return nil, err
		}
	}
	return img, nil
}

// layerMediaType is a gzip-compressed tar layer's media type in st's family.
func layerMediaType(mt types.MediaType, st stamp) (types.MediaType, error) {
	switch mt {
	case types.DockerLayer, types.OCILayer:
		if st.docker {
			return types.DockerLayer, nil
		}
		return types.OCILayer, nil
	}
	return "", fmt.Errorf("media type %s: want a gzip-compressed tar layer", mt)
}

func executorConfig(env []string) v1.Config {
	return v1.Config{User: User, WorkingDir: Workspace, Entrypoint: []string{HelperPath, "--pause"}, Env: env}
}

// DebianUserland is the executor image agents use: bash, coreutils, python3, pip and git
// from Debian's packages, the root internal/dev/debroot builds from the .debs the lock at
// lockPath pins (debroot.LockPath; make executor-debs fetches them), with its environment
// (PATH, HOME, LANG, the CA bundle). The lock pins one architecture: the userland serves
// linux on it alone.
func DebianUserland(lockPath string) Userland {
	return func(p v1.Platform, created time.Time) (v1.Image, error) {
		data, err := os.ReadFile(lockPath)
		if err != nil {
			return nil, fmt.Errorf("devimage: %w", err)
		}
		locked, err := debroot.ParseLock(data)
		if err != nil {
			return nil, fmt.Errorf("devimage: %s: %w", lockPath, err)
		}
		arch := ""
		for _, l := range locked {
			if l.Architecture != "all" {
				arch = l.Architecture
				break
			}
		}
		if p.OS != "linux" || p.Architecture != arch || p.Variant != "" {
			return nil, fmt.Errorf("devimage: Debian userland of %s for %s: %w (the lock pins linux/%s)", lockPath, p, ErrNoUserland, arch)
		}
		root, err := debroot.FromLock(lockPath, debroot.Options{Epoch: created})
		if err != nil {
			return nil, err
		}
		st := stamp{created: created}
		img, err := mutate.Append(st.scratch(), mutate.Addendum{Layer: root.Layer, MediaType: types.OCILayer,
			History: v1.History{Created: v1.Time{Time: created}, CreatedBy: fmt.Sprintf("debian userland: %d packages of %s", len(root.Packages), filepath.Base(lockPath))}})
		if err != nil {
			return nil, err
		}
		return configure(img, p, v1.Config{User: User, WorkingDir: Workspace, Env: root.Env}, st)
	}
}
