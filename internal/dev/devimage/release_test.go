package devimage

import (
	"archive/tar"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"maps"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/execplane/execplane/internal/dev/debroot"
)

// commitTime stands for a commit's time (git log -1 --format=%ct).
var commitTime = time.Unix(1796362643, 0)

// release is a release of stand-in programs ("gateway-linux_amd64", …) for platforms, its
// executor on a busybox userland of stand-ins that serves the platforms of serves (every
// platform when serves is nil).
func release(t *testing.T, platforms []string, serves []string) Release {
	t.Helper()
	dir := t.TempDir()
	var ps []v1.Platform
	for _, s := range platforms {
		p, err := ParsePlatforms(s)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p...)
		sub := filepath.Join(dir, strings.ReplaceAll(s, "/", "_"))
		if err := os.MkdirAll(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, prog := range []string{"gateway", "controller", "helper", "e2b"} {
			if err := os.WriteFile(filepath.Join(sub, prog), []byte(prog+"-"+filepath.Base(sub)), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	busybox := filepath.Join(dir, "busybox")
	if err := os.WriteFile(busybox, []byte("busybox-binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	userland := func(p v1.Platform, created time.Time) (v1.Image, error) {
		if serves != nil && !slices.Contains(serves, p.String()) {
			return nil, fmt.Errorf("stand-in: %w", ErrNoUserland)
		}
		return busyboxUserland(busybox, applets, p, stamp{created: created})
	}
	return Release{Version: "v1.2.3-4-gabcdef0", Commit: "abcdef0123456789", Created: commitTime, Platforms: ps, BinDir: dir, Userland: userland}
}

var amd64 = []string{"linux/amd64"}

func build(t *testing.T, r Release) map[string]Built {
	t.Helper()
	built, err := BuildRelease(r)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]Built{}
	var names []string
	for _, b := range built {
		out[b.Name] = b
		names = append(names, b.Name)
	}
	if want := []string{"gateway", "controller", "helper", "executor", "e2b"}; !slices.Equal(names, want) {
		t.Fatalf("images %v, want %v", names, want)
	}
	return out
}

func digests(t *testing.T, built map[string]Built) map[string]string {
	t.Helper()
	out := map[string]string{}
	for n, b := range built {
		d, err := b.Digest()
		if err != nil {
			t.Fatal(err)
		}
		out[n] = d.String()
	}
	return out
}

// One commit gives the same digests twice, from inputs written apart (nothing of the build's
// time, directory or order leaks in, and ggcr's gzip is deterministic); its time is in them.
func TestReleaseIsReproducible(t *testing.T) {
	both := []string{"linux/amd64", "linux/arm64"}
	for _, platforms := range [][]string{amd64, both} {
		a, b := digests(t, build(t, release(t, platforms, nil))), digests(t, build(t, release(t, platforms, nil)))
		if diff := cmp.Diff(a, b); diff != "" {
			t.Errorf("%v: two builds of one commit (-first +second):\n%s", platforms, diff)
		}
		later := release(t, platforms, nil)
		later.Created = later.Created.Add(time.Second)
		for n, d := range digests(t, build(t, later)) {
			if d == a[n] {
				t.Errorf("%v: %s: a later commit time gives the same digest", platforms, n)
			}
		}
	}
	// The layouts too, byte for byte.
	dirA, dirB := t.TempDir(), t.TempDir()
	for _, dir := range []string{dirA, dirB} {
		if err := WriteLayouts(dir, list(build(t, release(t, both, nil)))); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff(tree(t, dirA), tree(t, dirB)); diff != "" {
		t.Errorf("two layouts of one commit (-first +second):\n%s", diff)
	}
}

func list(built map[string]Built) []Built {
	var out []Built
	for _, n := range []string{"gateway", "controller", "helper", "executor", "e2b"} {
		out = append(out, built[n])
	}
	return out
}

// tree is every file under dir by its relative path, with its mode and content's hash.
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out[rel] = fmt.Sprintf("%v %x", fi.Mode(), sha256.Sum256(data))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func serverFS(program, content string) map[string]entry {
	return map[string]entry{
		"/etc":          {Type: tar.TypeDir, Mode: 0o755},
		"/etc/passwd":   {Type: tar.TypeReg, Mode: 0o644, Content: "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"},
		"/etc/group":    {Type: tar.TypeReg, Mode: 0o644, Content: "root:x:0:\nnonroot:x:65532:\n"},
		"/home":         {Type: tar.TypeDir, Mode: 0o755},
		"/home/nonroot": {Type: tar.TypeDir, Mode: 0o700, UID: 65532, GID: 65532},
		"/tmp":          {Type: tar.TypeDir, Mode: 0o1777},
		"/" + program:   {Type: tar.TypeReg, Mode: 0o755, Content: content},
	}
}

// What each product image holds and how it runs: every file's owner, mode and time, the
// configuration with the release's labels, a history entry per layer at the commit's time,
// OCI media types.
func TestReleaseImages(t *testing.T) {
	built := build(t, release(t, amd64, nil))
	labels := map[string]string{
		"org.opencontainers.image.source":   "https://github.com/execplane/execplane",
		"org.opencontainers.image.revision": "abcdef0123456789",
		"org.opencontainers.image.version":  "v1.2.3-4-gabcdef0",
		"org.opencontainers.image.created":  "2026-12-04T05:37:23Z",
	}
	exposed := func(ps ...string) map[string]struct{} {
		m := map[string]struct{}{}
		for _, p := range ps {
			m[p] = struct{}{}
		}
		return m
	}
	cases := []struct {
		name   string
		fs     map[string]entry
		layers int
		config v1.Config
	}{
		{"gateway", serverFS("gateway", "gateway-linux_amd64"), 2, v1.Config{User: "65532:65532", WorkingDir: "/home/nonroot",
			ExposedPorts: exposed("8443/tcp", "9090/tcp"), Entrypoint: []string{"/gateway"}, Labels: labels}},
		{"controller", serverFS("controller", "controller-linux_amd64"), 2, v1.Config{User: "65532:65532", WorkingDir: "/home/nonroot",
			ExposedPorts: exposed("9443/tcp", "9091/tcp"), Entrypoint: []string{"/controller"}, Labels: labels}},
		{"helper", map[string]entry{
			"/execplane":        {Type: tar.TypeDir, Mode: 0o755},
			"/execplane/helper": {Type: tar.TypeReg, Mode: 0o555, Content: "helper-linux_amd64"},
		}, 1, v1.Config{User: "65532:65532", Entrypoint: []string{"/execplane/helper"}, Labels: labels}},
		{"executor", executorFS("helper-linux_amd64", "busybox-binary"), 2, v1.Config{User: "65532:65532", WorkingDir: "/workspace",
			Entrypoint: []string{"/execplane/helper", "--pause"}, Env: []string{"PATH=/bin"}, Labels: labels}},
		{"e2b", serverFS("e2b", "e2b-linux_amd64"), 2, v1.Config{User: "65532:65532", WorkingDir: "/home/nonroot",
			ExposedPorts: exposed("3000/tcp", "9090/tcp"), Entrypoint: []string{"/e2b"}, Labels: labels}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := built[c.name]
			if b.Index != nil || b.Image == nil || b.Tag != "v1.2.3-4-gabcdef0" || b.PlatformList() != "linux/amd64" {
				t.Fatalf("built %+v", b)
			}
			img := b.Image
			if diff := cmp.Diff(c.fs, entries(t, img, commitTime)); diff != "" {
				t.Errorf("file system (-want +got):\n%s", diff)
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(c.config, cf.Config); diff != "" {
				t.Errorf("configuration (-want +got):\n%s", diff)
			}
			type meta struct {
				OS, Architecture string
				Created          time.Time
				History          []time.Time
				Manifest, Config types.MediaType
				Layers           []types.MediaType
			}
			want := meta{OS: "linux", Architecture: "amd64", Created: commitTime.UTC(), Manifest: types.OCIManifestSchema1, Config: types.OCIConfigJSON}
			for range c.layers {
				want.History = append(want.History, commitTime.UTC())
				want.Layers = append(want.Layers, types.OCILayer)
			}
			got := meta{OS: cf.OS, Architecture: cf.Architecture, Created: cf.Created.Time}
			for _, h := range cf.History {
				got.History = append(got.History, h.Created.Time)
				if h.CreatedBy == "" {
					t.Errorf("a history entry says nothing: %+v", h)
				}
			}
			m, err := img.Manifest()
			if err != nil {
				t.Fatal(err)
			}
			got.Manifest, got.Config = m.MediaType, m.Config.MediaType
			for _, l := range m.Layers {
				got.Layers = append(got.Layers, l.MediaType)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// Several platforms give an index per image, one manifest per platform, each with that
// platform's programs; the executor's covers the platforms its userland serves.
func TestReleaseForSeveralPlatforms(t *testing.T) {
	built := build(t, release(t, []string{"linux/amd64", "linux/arm64"}, amd64))
	for n, b := range built {
		want := []string{"linux/amd64", "linux/arm64"}
		if n == "executor" {
			want = amd64
		}
		if b.Image != nil || b.Index == nil || b.PlatformList() != strings.Join(want, ",") {
			t.Fatalf("%s: built %+v", n, b)
		}
		im, err := b.Index.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		if im.MediaType != types.OCIImageIndex || len(im.Manifests) != len(want) {
			t.Fatalf("%s: index %+v", n, im)
		}
		for i, d := range im.Manifests {
			img, err := b.Index.Image(d.Digest)
			if err != nil {
				t.Fatal(err)
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			program := map[string]string{"gateway": "/gateway", "controller": "/controller", "e2b": "/e2b"}[n]
			if program == "" {
				program = HelperPath
			}
			content := entries(t, img, commitTime)[program].Content
			arch := strings.TrimPrefix(want[i], "linux/")
			if d.Platform == nil || d.Platform.String() != want[i] || cf.Architecture != arch || !strings.HasSuffix(content, "linux_"+arch) {
				t.Errorf("%s manifest %d: platform %v, configuration for %s, %s holds %q; want %s", n, i, d.Platform, cf.Architecture, program, content, want[i])
			}
		}
	}
	if _, err := BuildRelease(release(t, []string{"linux/amd64", "linux/arm64"}, []string{})); !errors.Is(err, ErrNoUserland) {
		t.Fatalf("a userland serving no platform: %v", err)
	}
}

// A release is refused, every problem named, before anything is read.
func TestReleaseValidate(t *testing.T) {
	good := release(t, amd64, nil)
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := Release{Version: "v1+dirty", Created: time.Unix(0, 0),
		Platforms: []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "amd64"}, {OS: "darwin", Architecture: "arm64"}}}
	err := bad.Validate()
	for _, want := range []string{`version "v1+dirty"`, "no commit", "not after the Unix epoch", "platform linux/amd64 twice", `platform "darwin/arm64"`, "no binary directory", "no executor userland"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("want %q in %v", want, err)
		}
	}
	if _, err := BuildRelease(Release{}); err == nil || !strings.Contains(err.Error(), "no platform") {
		t.Errorf("an empty release: %v", err)
	}
	missing := good
	missing.BinDir = t.TempDir()
	if _, err := BuildRelease(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing programs: %v", err)
	}
}

func TestParsePlatforms(t *testing.T) {
	cases := []struct {
		in   string
		want []string
		ok   bool
	}{
		{"linux/amd64", []string{"linux/amd64"}, true},
		{"linux/amd64, linux/arm64", []string{"linux/amd64", "linux/arm64"}, true},
		{"", nil, false},
		{"linux", nil, false},
		{"darwin/arm64", nil, false},
		{"linux/arm/v7", nil, false},
		{"linux/", nil, false},
		{"linux/amd64,", []string{"linux/amd64"}, false},
	}
	for _, c := range cases {
		got, err := ParsePlatforms(c.in)
		var s []string
		for _, p := range got {
			s = append(s, p.String())
		}
		if (err == nil) != c.ok || !slices.Equal(s, c.want) {
			t.Errorf("%q: %v, %v; want %v (ok %v)", c.in, s, err, c.want, c.ok)
		}
	}
}

// Each image's layout names it by its tag and holds exactly its blobs; a second run
// replaces the first's layout, and a directory that is not a layout is left alone.
func TestWriteLayouts(t *testing.T) {
	dir := t.TempDir()
	for _, platforms := range [][]string{{"linux/amd64", "linux/arm64"}, amd64} {
		built := build(t, release(t, platforms, nil))
		if err := WriteLayouts(dir, list(built)); err != nil {
			t.Fatal(err)
		}
		for n, b := range built {
			idx, err := layout.ImageIndexFromPath(filepath.Join(dir, n))
			if err != nil {
				t.Fatal(err)
			}
			im, err := idx.IndexManifest()
			if err != nil {
				t.Fatal(err)
			}
			want, _ := b.Digest()
			if len(im.Manifests) != 1 || im.Manifests[0].Digest != want || im.Manifests[0].Annotations[RefNameAnnotation] != b.Tag {
				t.Fatalf("%s: index.json %+v, want %s named %s", n, im, want, b.Tag)
			}
			if d := im.Manifests[0]; (b.Image != nil) != (d.Platform != nil && d.Platform.String() == "linux/amd64") {
				t.Errorf("%s: platform %v in index.json", n, d.Platform)
			}
			// Nothing of the earlier layout is left: every blob is reachable.
			var blobs []string
			entries, err := os.ReadDir(filepath.Join(dir, n, "blobs", "sha256"))
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				blobs = append(blobs, e.Name())
			}
			if diff := cmp.Diff(reachable(t, b), blobs); diff != "" {
				t.Errorf("%s: blobs (-reachable +present):\n%s", n, diff)
			}
		}
		leftovers, _ := filepath.Glob(filepath.Join(dir, ".*"))
		if len(leftovers) > 0 {
			t.Errorf("left behind: %v", leftovers)
		}
		// ReadLayouts gives back what was written: names, tags, platforms and digests.
		names := slices.Sorted(maps.Keys(built))
		read, err := ReadLayouts(dir, names...)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range read {
			b := built[names[i]]
			got, _ := r.Digest()
			want, _ := b.Digest()
			if r.Name != names[i] || r.Tag != b.Tag || got != want || r.PlatformList() != b.PlatformList() || (r.Image != nil) != (b.Image != nil) {
				t.Errorf("read back %s %s %s [%s], want %s %s %s [%s]", r.Name, r.Tag, got, r.PlatformList(), names[i], b.Tag, want, b.PlatformList())
			}
		}
	}
	if _, err := ReadLayouts(dir, "missing"); err == nil || !strings.Contains(err.Error(), "missing layout") {
		t.Errorf("a missing layout: %v", err)
	}
	other := t.TempDir()
	keep := filepath.Join(other, "gateway", "keep")
	if err := os.MkdirAll(filepath.Dir(keep), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keep, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteLayouts(other, list(build(t, release(t, amd64, nil)))); err == nil || !strings.Contains(err.Error(), "not an OCI layout") {
		t.Fatalf("over a directory that is not a layout: %v", err)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Fatal(err)
	}
}

// reachable lists, sorted, the hex digests of every blob of b: manifests, configurations,
// layers and the index.
func reachable(t *testing.T, b Built) []string {
	t.Helper()
	seen := map[string]bool{}
	addImage := func(img v1.Image) {
		m, err := img.Manifest()
		if err != nil {
			t.Fatal(err)
		}
		d, _ := img.Digest()
		seen[d.Hex], seen[m.Config.Digest.Hex] = true, true
		for _, l := range m.Layers {
			seen[l.Digest.Hex] = true
		}
	}
	if b.Image != nil {
		addImage(b.Image)
	} else {
		d, _ := b.Index.Digest()
		seen[d.Hex] = true
		im, err := b.Index.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range im.Manifests {
			img, err := b.Index.Image(m.Digest)
			if err != nil {
				t.Fatal(err)
			}
			addImage(img)
		}
	}
	out := make([]string, 0, len(seen))
	for h := range seen {
		out = append(out, h)
	}
	slices.Sort(out)
	return out
}

// Pushed to a registry (ggcr's, in-process, plain HTTP on 127.0.0.1) by digest and tagged,
// each image pulls back by digest and by tag with the digest it was built with.
func TestPush(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	anonymous := authn.NewMultiKeychain()
	for _, platforms := range [][]string{amd64, {"linux/amd64", "linux/arm64"}} {
		built := list(build(t, release(t, platforms, nil)))
		prefix := host + "/execplane/" + strings.ReplaceAll(strings.Join(platforms, "-"), "/", "-")
		pushed, err := Push(t.Context(), PushOptions{Registry: prefix, Keychain: anonymous}, built)
		if err != nil {
			t.Fatal(err)
		}
		if len(pushed) != len(built) {
			t.Fatalf("pushed %v", pushed)
		}
		for i, p := range pushed {
			want, _ := built[i].Digest()
			if p.Name != built[i].Name || p.Digest != want || p.String() != prefix+"/"+p.Name+":v1.2.3-4-gabcdef0@"+want.String() {
				t.Errorf("pushed %s, want %s@%s", p, built[i].Name, want)
			}
			byDigest, err := name.ParseReference(p.String())
			if err != nil {
				t.Fatal(err)
			}
			for _, ref := range []name.Reference{byDigest, p.Tag} {
				desc, err := remote.Get(ref, remote.WithContext(t.Context()))
				if err != nil {
					t.Fatal(err)
				}
				var got v1.Hash
				if built[i].Image != nil {
					img, err := desc.Image()
					if err != nil {
						t.Fatal(err)
					}
					got, err = img.Digest()
					if err != nil {
						t.Fatal(err)
					}
				} else {
					idx, err := desc.ImageIndex()
					if err != nil {
						t.Fatal(err)
					}
					got, err = idx.Digest()
					if err != nil {
						t.Fatal(err)
					}
				}
				if got != want || desc.Digest != want {
					t.Errorf("%s pulled back as %s (descriptor %s), pushed %s", ref, got, desc.Digest, want)
				}
			}
		}
	}
	// A registry must be named: no silent Docker Hub.
	if _, err := Push(t.Context(), PushOptions{Registry: "execplane", Keychain: anonymous}, list(build(t, release(t, amd64, nil)))); err == nil {
		t.Error("pushed to a registry without a host")
	}
}

// A userland for another platform is refused; one built with Docker's media types (as
// empty.Image and Layer have them) is taken under OCI's, giving the very executor image an
// OCI userland gives.
func TestExecutorUserlands(t *testing.T) {
	r := release(t, amd64, nil)
	busybox := filepath.Join(r.BinDir, "busybox")
	r.Userland = func(p v1.Platform, created time.Time) (v1.Image, error) {
		return busyboxUserland(busybox, applets, v1.Platform{OS: "linux", Architecture: "arm64"}, stamp{created: created})
	}
	if _, err := BuildRelease(r); err == nil || !strings.Contains(err.Error(), "the userland is for linux/arm64") {
		t.Errorf("a userland of another platform: %v", err)
	}

	want := digests(t, build(t, release(t, amd64, nil)))["executor"]
	r.Userland = func(p v1.Platform, created time.Time) (v1.Image, error) {
		return busyboxUserland(busybox, applets, p, stamp{created: created, docker: true})
	}
	built := build(t, r)
	if got := digests(t, built)["executor"]; got != want {
		t.Errorf("on a Docker-typed userland: %s, on an OCI one: %s", got, want)
	}
	m, err := built["executor"].Image.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range m.Layers {
		if l.MediaType != types.OCILayer {
			t.Errorf("layer %s: %s", l.Digest, l.MediaType)
		}
	}
}

// The Debian userland serves the lock's architecture alone, and names what is missing: the
// lock, or its fetched packages (make executor-debs).
func TestDebianUserlandRefuses(t *testing.T) {
	lock := filepath.Join("..", "..", "..", debroot.LockPath)
	arm := v1.Platform{OS: "linux", Architecture: "arm64"}
	if _, err := DebianUserland(lock)(arm, time.Unix(1, 0)); !errors.Is(err, ErrNoUserland) || !strings.Contains(err.Error(), "linux/amd64") {
		t.Errorf("for %s: %v", arm, err)
	}
	if _, err := DebianUserland(filepath.Join(t.TempDir(), "missing.lock"))(v1.Platform{OS: "linux", Architecture: "amd64"}, time.Unix(1, 0)); err == nil {
		t.Error("a missing lock was accepted")
	}
	t.Setenv("EXECUTOR_DEBS_CACHE", t.TempDir()) // an empty cache: nothing fetched
	if _, err := DebianUserland(lock)(v1.Platform{OS: "linux", Architecture: "amd64"}, time.Unix(1, 0)); !errors.Is(err, debroot.ErrNotFetched) {
		t.Errorf("with nothing fetched: %v", err)
	}
}
