package devimage

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// PushOptions say where images go.
type PushOptions struct {
	// Registry is HOST[:PORT][/PREFIX]: the image NAME goes to Registry/NAME. The host is
	// required (no implicit Docker Hub): docker.io/ORG for it.
	Registry string
	// Insecure reaches the registry over plain HTTP. ggcr already does for localhost,
	// loopback and private (RFC 1918) addresses, such as a test registry on 127.0.0.1.
	Insecure bool
	// Keychain finds the registry's credentials; nil means authn.DefaultKeychain (the
	// Docker configuration `docker login` and `crane auth login` write).
	Keychain authn.Keychain
}

// Pushed is one image in a registry.
type Pushed struct {
	Name   string
	Tag    name.Tag
	Digest v1.Hash
}

// String is the pushed reference: REGISTRY/NAME:TAG@DIGEST.
func (p Pushed) String() string { return p.Tag.String() + "@" + p.Digest.String() }

// Push pushes each image by digest to o.Registry/NAME, then tags it with its Tag, in
// order; it stops at the first failure, returning what was pushed before it.
func Push(ctx context.Context, o PushOptions, built []Built) ([]Pushed, error) {
	if o.Registry == "" {
		return nil, errors.New("devimage: push: no registry")
	}
	opts := []name.Option{name.StrictValidation}
	if o.Insecure {
		opts = append(opts, name.Insecure)
	}
	kc := o.Keychain
	if kc == nil {
		kc = authn.DefaultKeychain
	}
	remoteOpts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(kc)}
	var out []Pushed
	for _, b := range built {
		repo, err := name.NewRepository(o.Registry+"/"+b.Name, opts...)
		if err != nil {
			return out, fmt.Errorf("devimage: push %s: %w", b.Name, err)
		}
		digest, err := b.Digest()
		if err != nil {
			return out, fmt.Errorf("devimage: push %s: %w", b.Name, err)
		}
		var t remote.Taggable = b.Index
		if b.Image != nil {
			t = b.Image
		}
		if err := remote.Push(repo.Digest(digest.String()), t, remoteOpts...); err != nil {
			return out, fmt.Errorf("devimage: push %s: %w", repo, err)
		}
		tag := repo.Tag(b.Tag)
		if err := remote.Tag(tag, t, remoteOpts...); err != nil {
			return out, fmt.Errorf("devimage: tag %s: %w", tag, err)
		}
		out = append(out, Pushed{Name: b.Name, Tag: tag, Digest: digest})
	}
	return out, nil
}
