package devimage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Source is the repository the product images are built from: their
// org.opencontainers.image.source.
const Source = "https://github.com/execplane/execplane"

// Base is what a product image's program is added to.
type Base int

const (
	// BaseScratch is nothing at all: the program alone (the Dockerfile's FROM scratch).
	BaseScratch Base = iota
	// BaseNonroot is what the servers use of the Dockerfile's distroless static:nonroot:
	// the passwd and group naming root and the non-root user (65532), its home (the working
	// directory) and /tmp. Not distroless's CA certificates: every TLS configuration names
	// its own roots (the gateway's and controller's mTLS CAs, the in-cluster service account
	// CA for the API server), so nothing reads the system's. Not its tzdata: nothing loads a
	// time zone (logs are UTC). Not its nsswitch.conf: without one Go's resolver reads
	// /etc/hosts and then DNS, as distroless's says.
	BaseNonroot
	// BaseUserland is the executor's userland (Release.Userland).
	BaseUserland
)

// String names the base as the Dockerfile does.
func (b Base) String() string {
	switch b {
	case BaseScratch:
		return "scratch"
	case BaseNonroot:
		return "distroless static:nonroot"
	case BaseUserland:
		return "executor userland"
	}
	return fmt.Sprintf("Base(%d)", int(b))
}

// nonrootHome is the non-root user's home, distroless nonroot's, and the servers' working
// directory (the Dockerfile's gateway and controller inherit it from their base).
const nonrootHome = "/home/nonroot"

// nonrootFiles are BaseNonroot's files.
func nonrootFiles() []File {
	return []File{
		{Path: "/etc/passwd", Mode: 0o644, Content: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:" + nonrootHome + ":/sbin/nologin\n")},
		{Path: "/etc/group", Mode: 0o644, Content: []byte("root:x:0:\nnonroot:x:65532:\n")},
		{Path: nonrootHome, Mode: os.ModeDir | 0o700, UID: nonrootID, GID: nonrootID},
		{Path: "/tmp", Mode: os.ModeDir | os.ModeSticky | 0o777},
	}
}

// Spec describes one product image. deploy/images/Dockerfile has a target of the same shape
// for each (a test compares them): the same paths, user, ports and entrypoint.
type Spec struct {
	// Name is the image's repository under a registry (REGISTRY/Name:VERSION) and its
	// layout's directory.
	Name string
	// Program is the cmd/ program the image carries, at Path with Mode.
	Program string
	Path    string
	Mode    os.FileMode
	Base    Base
	// Config is how the image runs (the executor's Env comes from its userland).
	Config v1.Config
}

// Specs returns the product images: gateway, controller, helper, executor and e2b.
func Specs() []Spec {
	ports := func(ps ...string) map[string]struct{} {
		m := map[string]struct{}{}
		for _, p := range ps {
			m[p] = struct{}{}
		}
		return m
	}
	// go build writes 0755 and the Dockerfile copies the servers as they are.
	const built = 0o755
	return []Spec{
		// The public API: mTLS gRPC on 8443, diagnostics on 9090.
		{Name: "gateway", Program: "gateway", Path: "/gateway", Mode: built, Base: BaseNonroot, Config: v1.Config{
			User: User, WorkingDir: nonrootHome, ExposedPorts: ports("8443/tcp", "9090/tcp"), Entrypoint: []string{"/gateway"}}},
		// The leader-elected controller: control API on 9443, diagnostics on 9091.
		{Name: "controller", Program: "controller", Path: "/controller", Mode: built, Base: BaseNonroot, Config: v1.Config{
			User: User, WorkingDir: nonrootHome, ExposedPorts: ports("9443/tcp", "9091/tcp"), Entrypoint: []string{"/controller"}}},
		{Name: "helper", Program: "helper", Path: HelperPath, Mode: HelperInstallMode, Base: BaseScratch, Config: helperConfig()},
		{Name: "executor", Program: "helper", Path: HelperPath, Mode: HelperExecMode, Base: BaseUserland, Config: executorConfig(nil)},
		// The E2B front end (docs/e2b.md): E2B's control API and envd on 3000, diagnostics on
		// 9090.
		{Name: "e2b", Program: "e2b", Path: "/e2b", Mode: built, Base: BaseNonroot, Config: v1.Config{
			User: User, WorkingDir: nonrootHome, ExposedPorts: ports("3000/tcp", "9090/tcp"), Entrypoint: []string{"/e2b"}}},
	}
}

// Release is what a release's images are built from.
type Release struct {
	// Version is the images' tag and org.opencontainers.image.version (VERSION, git describe).
	Version string
	// Commit is the source revision (org.opencontainers.image.revision).
	Commit string
	// Created is the commit's time (SOURCE_DATE_EPOCH): the time of every file, history
	// entry and configuration, so that one commit gives the same digests.
	Created time.Time
	// Platforms are the images' platforms: one gives images, several indexes.
	Platforms []v1.Platform
	// BinDir holds the static programs, BinDir/<os>_<arch>/<program>.
	BinDir string
	// Userland is the executor image's userland (BusyboxUserland, for now).
	Userland Userland
}

// tagPattern is the OCI distribution spec's tag grammar.
var tagPattern = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

// Validate reports every problem of r at once.
func (r Release) Validate() error {
	var errs []error
	if !tagPattern.MatchString(r.Version) {
		errs = append(errs, fmt.Errorf("version %q is not an image tag", r.Version))
	}
	if r.Commit == "" {
		errs = append(errs, errors.New("no commit"))
	}
	if r.Created.Unix() <= 0 {
		errs = append(errs, fmt.Errorf("creation time %s is not after the Unix epoch (the commit's time, SOURCE_DATE_EPOCH)", r.Created))
	}
	if len(r.Platforms) == 0 {
		errs = append(errs, errors.New("no platform"))
	}
	for i, p := range r.Platforms {
		if err := checkPlatform(p); err != nil {
			errs = append(errs, err)
		}
		if slices.ContainsFunc(r.Platforms[:i], p.Equals) {
			errs = append(errs, fmt.Errorf("platform %s twice", p))
		}
	}
	if r.BinDir == "" {
		errs = append(errs, errors.New("no binary directory"))
	}
	if r.Userland == nil {
		errs = append(errs, errors.New("no executor userland"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("devimage: release: %w", err)
	}
	return nil
}

// checkPlatform refuses what the images cannot be: a platform that is not linux, or one
// with a variant (the programs are built with GOOS and GOARCH alone).
func checkPlatform(p v1.Platform) error {
	if p.OS != "linux" || p.Architecture == "" || p.Variant != "" || p.OSVersion != "" || len(p.Features) > 0 || len(p.OSFeatures) > 0 {
		return fmt.Errorf("platform %q: want linux/ARCH", p.String())
	}
	return nil
}

// ParsePlatforms parses a comma-separated list of linux/ARCH platforms
// ("linux/amd64,linux/arm64").
func ParsePlatforms(s string) ([]v1.Platform, error) {
	var out []v1.Platform
	var errs []error
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		goos, arch, ok := strings.Cut(f, "/")
		p := v1.Platform{OS: goos, Architecture: arch}
		if !ok || strings.Contains(arch, "/") {
			errs = append(errs, fmt.Errorf("platform %q: want linux/ARCH", f))
			continue
		}
		if err := checkPlatform(p); err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, p)
	}
	return out, errors.Join(errs...)
}

// Built is one product image of a release: an image for one platform, an index for several.
type Built struct {
	Name string
	// Tag is the release's version, the tag it is pushed under and its layout's ref.name.
	Tag       string
	Platforms []v1.Platform
	// Exactly one is set: Image when the release has one platform, Index otherwise.
	Image v1.Image
	Index v1.ImageIndex
}

// Digest is the digest of the image's manifest, or of its index.
func (b Built) Digest() (v1.Hash, error) {
	if b.Index != nil {
		return b.Index.Digest()
	}
	return b.Image.Digest()
}

// PlatformList is the image's platforms, comma-separated.
func (b Built) PlatformList() string {
	s := make([]string, len(b.Platforms))
	for i, p := range b.Platforms {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

// BuildRelease builds the product images of Specs for r's platforms, in Specs' order. The
// executor image is built for the platforms r.Userland serves (an error when none).
func BuildRelease(r Release) ([]Built, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	st := stamp{created: r.Created.UTC(), labels: map[string]string{
		"org.opencontainers.image.source":   Source,
		"org.opencontainers.image.revision": r.Commit,
		"org.opencontainers.image.version":  r.Version,
		"org.opencontainers.image.created":  r.Created.UTC().Format(time.RFC3339),
	}}
	var out []Built
	for _, spec := range Specs() {
		b := Built{Name: spec.Name, Tag: r.Version}
		var imgs []v1.Image
		for _, p := range r.Platforms {
			img, err := r.image(spec, p, st)
			if errors.Is(err, ErrNoUserland) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("devimage: %s for %s: %w", spec.Name, p, err)
			}
			imgs, b.Platforms = append(imgs, img), append(b.Platforms, p)
		}
		switch {
		case len(imgs) == 0:
			return nil, fmt.Errorf("devimage: %s: %w for any of the platforms", spec.Name, ErrNoUserland)
		case len(r.Platforms) == 1:
			b.Image = imgs[0]
		default:
			b.Index = index(imgs, b.Platforms)
		}
		out = append(out, b)
	}
	return out, nil
}

// image is one product image for one platform: its base, then its program in a layer of its
// own (as the Dockerfile's COPY), then its configuration.
func (r Release) image(spec Spec, p v1.Platform, st stamp) (v1.Image, error) {
	bin, err := os.ReadFile(filepath.Join(r.BinDir, p.OS+"_"+p.Architecture, spec.Program))
	if err != nil {
		return nil, err
	}
	program := []File{{Path: spec.Path, Mode: spec.Mode, Content: bin}}
	copyProgram := "COPY " + spec.Program + " " + spec.Path
	img := st.scratch()
	switch spec.Base {
	case BaseUserland:
		userland, err := r.Userland(p, st.created)
		if err != nil {
			return nil, err
		}
		return executor(userland, bin, p, st)
	case BaseNonroot:
		if img, err = withLayer(img, nonrootFiles(), "nonroot base: passwd, group, "+nonrootHome+", /tmp", st); err != nil {
			return nil, err
		}
	}
	if img, err = withLayer(img, program, copyProgram, st); err != nil {
		return nil, err
	}
	return configure(img, p, spec.Config, st)
}

// index is an OCI image index of imgs, one per platform.
func index(imgs []v1.Image, platforms []v1.Platform) v1.ImageIndex {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for i, img := range imgs {
		p := platforms[i]
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
	}
	return idx
}
