package debroot

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"golang.org/x/sync/errgroup"
)

// Options says how Build lays the root out.
type Options struct {
	// Epoch is every entry's modification time (for instance the commit's time); the zero
	// Time means the Unix epoch, as the other images of internal/dev/devimage have it.
	Epoch time.Time
}

// Root is a root filesystem built from packages.
type Root struct {
	// Layer is the whole root as one layer.
	Layer v1.Layer
	// Env is the environment the image's config should carry (Env).
	Env []string
	// Packages are the packages unpacked, by name.
	Packages []Package
}

// Build unpacks debs (paths of .deb files, in any order) into one layer, merged-/usr, with
// what the packages' maintainer scripts would have done at run time done explicitly
// (setup). It runs nothing of the packages'. All packages must be of one architecture
// (or "all").
func Build(debs []string, opts Options) (*Root, error) {
	unpacked, err := readDebs(debs)
	if err != nil {
		return nil, err
	}
	return build(unpacked, opts)
}

// readDebs unpacks the .debs at paths, one per core (unpacking is xz decompression).
func readDebs(paths []string) ([]*deb, error) {
	if len(paths) == 0 {
		return nil, fmt.Errorf("debroot: no packages")
	}
	unpacked := make([]*deb, len(paths))
	var g errgroup.Group
	g.SetLimit(runtime.GOMAXPROCS(0))
	for i, p := range paths {
		g.Go(func() error {
			f, err := os.Open(p)
			if err != nil {
				return fmt.Errorf("debroot: %w", err)
			}
			defer f.Close()
			d, err := readDeb(f)
			if err != nil {
				return fmt.Errorf("debroot: %s: %w", p, err)
			}
			unpacked[i] = d
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return unpacked, nil
}

// build merges unpacked packages (which it does not change) into a Root.
func build(debs []*deb, opts Options) (*Root, error) {
	// Merge in name order whatever order the caller gave: the same packages, the same root.
	debs = slices.Clone(debs)
	slices.SortFunc(debs, func(a, b *deb) int { return strings.Compare(a.pkg.Name, b.pkg.Name) })
	arch := ""
	var pkgs []Package
	for i, d := range debs {
		if i > 0 && d.pkg.Name == debs[i-1].pkg.Name {
			return nil, fmt.Errorf("debroot: package %s twice", d.pkg.Name)
		}
		pkgs = append(pkgs, d.pkg)
		switch a := d.pkg.Architecture; {
		case a == "all":
		case arch == "":
			arch = a
		case a != arch:
			return nil, fmt.Errorf("debroot: %s is %s, %s is %s: one architecture only", d.pkg.Name, a, pkgs[0].Name, arch)
		}
	}
	if _, ok := mergedDirs[arch]; !ok {
		return nil, fmt.Errorf("debroot: architecture %q: no merged-/usr layout known", arch)
	}
	t := newTree(mergedDirs[arch])
	for _, d := range debs {
		if err := t.addPackage(d, keep); err != nil {
			return nil, fmt.Errorf("debroot: %w", err)
		}
	}
	if err := t.setup(arch, pkgs); err != nil {
		return nil, fmt.Errorf("debroot: %w", err)
	}
	if err := t.complete(); err != nil {
		return nil, fmt.Errorf("debroot: %w", err)
	}
	epoch := time.Unix(0, 0)
	if !opts.Epoch.IsZero() {
		epoch = opts.Epoch.Truncate(time.Second)
	}
	data, err := t.tar(epoch)
	if err != nil {
		return nil, fmt.Errorf("debroot: %w", err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		return nil, fmt.Errorf("debroot: %w", err)
	}
	return &Root{Layer: layer, Env: slices.Clone(Env), Packages: pkgs}, nil
}

// dropped are the trees left out of the root, as Debian's slim container images leave them
// out (dpkg path-exclude): documentation, manual pages and translations (the image runs in
// the C.UTF-8 locale) — about 45 MB of 165. Each package's copyright file stays.
var dropped = []string{
	"/usr/share/doc/", "/usr/share/man/", "/usr/share/info/", "/usr/share/locale/",
	"/usr/share/lintian/",
}

// keep reports whether a path of a package goes into the root.
func keep(p string) bool {
	for _, d := range dropped {
		rest, ok := strings.CutPrefix(p, d)
		if !ok {
			continue
		}
		// /usr/share/doc/<package> and its copyright stay.
		if d == "/usr/share/doc/" {
			pkg, file, nested := strings.Cut(rest, "/")
			return pkg != "" && (!nested || file == "copyright")
		}
		return false
	}
	return true
}

// tar writes the root as an uncompressed tar: entries sorted by path, owned by root, every
// time epoch; of the paths of one hard-linked file the first in order holds the content
// and the others link to it.
func (t *tree) tar(epoch time.Time) ([]byte, error) {
	paths := make([]string, 0, len(t.nodes))
	for p := range t.nodes {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	first := map[int]string{} // inode → the path that holds its content
	for _, p := range paths {
		n := t.nodes[p]
		h := &tar.Header{
			Name: strings.TrimPrefix(p, "/"), Mode: n.mode, ModTime: epoch, Typeflag: n.typ,
			Format: tar.FormatPAX,
		}
		switch n.typ {
		case tar.TypeDir:
			h.Name += "/"
		case tar.TypeSymlink:
			h.Linkname = n.link
		case tar.TypeReg:
			if to, ok := first[n.inode]; ok {
				h.Typeflag, h.Linkname = tar.TypeLink, strings.TrimPrefix(to, "/")
				break
			}
			first[n.inode] = p
			h.Size = int64(len(n.content))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(n.content); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
