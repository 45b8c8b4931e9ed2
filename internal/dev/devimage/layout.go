package devimage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// RefNameAnnotation names an image in an OCI layout's index.json (the OCI image spec's
// annotation): its tag, as skopeo's oci:DIR:TAG and containerd's import read it.
const RefNameAnnotation = "org.opencontainers.image.ref.name"

// layoutMarker is the file every OCI image layout holds: the proof that a directory
// WriteLayouts replaces is one it wrote.
const layoutMarker = "oci-layout"

// WriteLayouts writes each image as an OCI image layout of its own at dir/<name> — one
// repository's worth each, for `crane push dir/gateway REF` or `skopeo copy oci:dir/gateway:TAG …`
// — its index.json naming the image (or index) by RefNameAnnotation = its tag, and the image's
// platform when it has one. An earlier layout at dir/<name> is replaced; anything else there
// is refused.
func WriteLayouts(dir string, built []Built) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("devimage: %w", err)
	}
	for _, b := range built {
		if err := writeLayout(dir, b); err != nil {
			return fmt.Errorf("devimage: %s layout: %w", b.Name, err)
		}
	}
	return nil
}

func writeLayout(dir string, b Built) error {
	final := filepath.Join(dir, b.Name)
	if _, err := os.Stat(final); err == nil {
		if _, err := os.Stat(filepath.Join(final, layoutMarker)); err != nil {
			return fmt.Errorf("%s exists and is not an OCI layout: not replacing it", final)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	// Written beside the final directory and renamed over it, so that an interrupted run
	// leaves the earlier layout whole (and no blob of it behind in the new one).
	tmp, err := os.MkdirTemp(dir, "."+b.Name+"-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	desc := v1.Descriptor{Annotations: map[string]string{RefNameAnnotation: b.Tag}}
	var add mutate.Appendable = b.Index
	if b.Image != nil {
		add, desc.Platform = b.Image, &b.Platforms[0]
	}
	top := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), mutate.IndexAddendum{Add: add, Descriptor: desc})
	if _, err := layout.Write(tmp, top); err != nil {
		return err
	}
	if err := os.RemoveAll(final); err != nil {
		return err
	}
	return os.Rename(tmp, final)
}

// ReadLayouts reads back the images WriteLayouts wrote under dir, one per name, in names'
// order: each layout's index must name exactly one image or index, by RefNameAnnotation.
func ReadLayouts(dir string, names ...string) ([]Built, error) {
	var out []Built
	for _, n := range names {
		b, err := readLayout(filepath.Join(dir, n))
		if err != nil {
			return nil, fmt.Errorf("devimage: %s layout (make images writes it): %w", n, err)
		}
		b.Name = n
		out = append(out, b)
	}
	return out, nil
}

func readLayout(p string) (Built, error) {
	var b Built
	top, err := layout.ImageIndexFromPath(p)
	if err != nil {
		return b, err
	}
	m, err := top.IndexManifest()
	if err != nil {
		return b, err
	}
	if len(m.Manifests) != 1 {
		return b, fmt.Errorf("%d entries in its index.json, want 1", len(m.Manifests))
	}
	desc := m.Manifests[0]
	b.Tag = desc.Annotations[RefNameAnnotation]
	if b.Tag == "" {
		return b, errors.New("its index.json names no tag")
	}
	if desc.MediaType.IsIndex() {
		if b.Index, err = top.ImageIndex(desc.Digest); err != nil {
			return b, err
		}
		idx, err := b.Index.IndexManifest()
		if err != nil {
			return b, err
		}
		for _, d := range idx.Manifests {
			if d.Platform != nil {
				b.Platforms = append(b.Platforms, *d.Platform)
			}
		}
		return b, nil
	}
	if b.Image, err = top.Image(desc.Digest); err != nil {
		return b, err
	}
	if desc.Platform != nil {
		b.Platforms = []v1.Platform{*desc.Platform}
	}
	return b, nil
}
